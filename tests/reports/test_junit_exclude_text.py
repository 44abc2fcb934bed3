"""JUnit, the exclude file and the text report on hand-made reports."""

from __future__ import annotations

import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from preflight.model import CheckOutcome, Finding, JobReport, ReportMeta, Severity
from preflight.reports import exclude, junit, probes_table, text
from tests.helpers.synthetic import big_report


def _report(findings: list[Finding], checks: list[CheckOutcome], bad_hosts: list[str]) -> JobReport:
    meta = ReportMeta(launcher="slurm", job_id="7", run_id="r", world_size=8, num_nodes=2, master_addr="a",
                      master_port=1, started_at="2026-01-01T00:00:00+00:00")
    return JobReport(meta=meta, findings=findings, checks=checks, bad_hosts=bad_hosts, verdict="failed",
                     exit_code=3, why="x")


def test_junit_one_testcase_per_check_failure_skip_and_pass() -> None:
    checks = [CheckOutcome(c, c[:3].lower(), "local", f"{c} title", Severity.OK)
              for c in ("ENV001", "ENV002", "NET001")]
    checks.append(CheckOutcome("GPU001", "gpu", "local", "gpu", Severity.COULD_NOT_RUN))
    findings = [
        Finding("ENV001", Severity.ERROR, "bad & <wrong>", hint="fix it", ranks=[1], hosts=["n1"]),
        Finding("ENV001", Severity.WARN, "also odd", hint="look"),
        Finding("NET001", Severity.WARN, "slow-ish", hint="cable"),
        Finding("RUN003", Severity.COULD_NOT_RUN, "probes not started", hint="fix errors first"),
    ]
    root = ET.fromstring(junit.render(_report(findings, checks, [])).split("\n", 1)[1])
    cases = {c.get("name", "").split(":")[0]: c for c in root.iter("testcase")}
    assert sorted(cases) == ["ENV001", "ENV002", "GPU001", "NET001", "RUN003"]
    assert root.get("tests") == "5" and root.get("failures") == "1" and root.get("skipped") == "2"
    failure = cases["ENV001"].find("failure")
    assert failure.get("message") == "rank 1 on n1: bad & <wrong>" and "fix it" in failure.text
    assert cases["RUN003"].find("skipped").get("message") == "probes not started"
    assert cases["GPU001"].find("skipped") is not None
    assert cases["ENV002"].find("failure") is None and cases["ENV002"].find("skipped") is None
    assert "slow-ish" in cases["NET001"].find("system-out").text
    assert cases["RUN003"].get("classname") == "preflight.run"


def test_exclude_file_one_host_per_line_and_empty_when_none(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)  # a missing folder is created inside the current directory only
    exclude.write(_report([], [], ["gpu07", "gpu08"]), str(tmp_path / "bad.txt"))
    assert (tmp_path / "bad.txt").read_text() == "gpu07\ngpu08\n"
    exclude.write(_report([], [], []), str(tmp_path / "none" / "bad.txt"))
    assert (tmp_path / "none" / "bad.txt").read_text() == ""


def test_text_report_has_probe_and_drift_tables() -> None:
    report = big_report(world_size=64, ranks_per_host=8, mesh="dp2,pp2,tp16")
    out = text.render(report)
    assert out.startswith("preflight: FAILED (exit 3)")
    assert "--exclude=gpu[0007,0042]" in out
    probes = out.split(probes_table.TITLE, 1)[1].split("environment drift", 1)[0]
    rows = [line for line in probes.splitlines() if line.startswith(("dp ", "pp ", "tp "))]
    # One row per dimension x op x size, each dimension's ops at every size.
    assert len(rows) == len({(p.dim, p.op, p.size_bytes) for p in report.probes}) == 3 * 3 * 7
    assert "'mlx5_1' on ranks 48-55 (gpu0007)" in out
    assert max(len(line) for line in out.splitlines()) < 200  # readable in a Slurm .out file


def _on_hosts(findings: list[Finding], bad_hosts: list[str], exit_code: int = 3) -> JobReport:
    from tests.helpers.facts import rank_facts
    report = _report(findings, [], bad_hosts)
    report.ranks = [rank_facts(r, f"n{r // 2 + 1}", world_size=6, local_world_size=2) for r in range(6)]
    report.exit_code = exit_code
    return report


def test_retry_excludes_the_hosts_when_every_error_is_a_hosts_fault(tmp_path: Path) -> None:
    blamed = Finding("RANK001", Severity.ERROR, "rank 3 missing", hosts=["n2"], blames_host=True)
    one_node = Finding("NCCL008", Severity.ERROR, "bad ifname", hosts=["n3"])
    report = _on_hosts([blamed, one_node, Finding("ENV003", Severity.WARN, "drift", hosts=["n1", "n2", "n3"])],
                       ["n2", "n3"])
    assert exclude.retry_hosts(report) == ["n2", "n3"]
    exclude.write_retry(report, str(tmp_path / "retry.txt"))
    assert (tmp_path / "retry.txt").read_text() == "n2\nn3\n"


def test_no_retry_when_an_error_is_the_jobs_own_configuration(tmp_path: Path) -> None:
    blamed = Finding("RANK001", Severity.ERROR, "rank 3 missing", hosts=["n2"], blames_host=True)
    everywhere = Finding("NCCL001", Severity.ERROR, "async error handling off", hosts=["n1", "n2", "n3"])
    nowhere = Finding("RUN001", Severity.ERROR, "store did not form")
    assert exclude.retry_hosts(_on_hosts([blamed, everywhere], ["n2"])) == []
    assert exclude.retry_hosts(_on_hosts([blamed, nowhere], ["n2"])) == []
    assert exclude.retry_hosts(_on_hosts([blamed], ["n2"], exit_code=4)) == []  # incomplete proves nothing
    exclude.write_retry(_on_hosts([everywhere], []), str(tmp_path / "retry.txt"))
    assert (tmp_path / "retry.txt").read_text() == ""
