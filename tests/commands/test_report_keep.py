"""`preflight report run.json --keep N --hostfile kept.txt`: the spare-node choice as a command.

Reports are written by the verdict step from findings (tests/helpers/facts.built_report), then the
real CLI runs as a subprocess, as a job script or a torchrun/mpirun user would call it.
"""

from __future__ import annotations

from pathlib import Path

from preflight.model import Finding, Severity
from preflight.reports import json as json_report
from tests.helpers.facts import built_report, host_facts
from tests.helpers.ranks import run_cli


def _written(tmp_path: Path, *bad: str, hosts: tuple[str, ...] = ("n1", "n2", "n3"), old: bool = False) -> Path:
    findings = [Finding("NCCL008", Severity.ERROR, "NCCL_SOCKET_IFNAME=nosuch0 matches no interface", "fix it",
                        [], list(bad))] if bad else []
    report = built_report(host_facts(list(hosts)), findings)
    if old:
        report.host_ranking = None  # as a preflight from before spare nodes wrote it
    path = tmp_path / "report.json"
    json_report.write(report, str(path))
    return path


def test_keep_writes_the_hostfile_explains_and_every_format_has_the_section(tmp_path: Path) -> None:
    report = _written(tmp_path, "n1")
    out = {name: tmp_path / name for name in ("kept.txt", "out.json", "out.html", "out.txt")}
    run = run_cli(["report", str(report), "--keep", "2", "--hostfile", str(out["kept.txt"]), "--json",
                   str(out["out.json"]), "--html", str(out["out.html"]), "--text", str(out["out.txt"])])
    assert run.returncode == 0, run.stdout + run.stderr
    assert out["kept.txt"].read_text() == "n2\nn3\n"
    assert "kept n[2-3]" in run.stdout and "dropped n1: NCCL008" in run.stdout
    assert "FAILED" not in run.stdout  # the choice alone: the run printed its verdict already
    again = json_report.load(out["out.json"])
    assert again.host_choice is not None and again.host_choice.kept == ["n2", "n3"]
    assert again.exit_code == 3  # the run's own verdict is unchanged
    html = out["out.html"].read_text()
    assert 'id="host-choice"' in html and "--nodelist=n[2-3]" in html and "nosuch0" in html
    assert "dropped n1: NCCL008" in out["out.txt"].read_text()


def test_too_few_healthy_hosts_exit_3_with_an_empty_hostfile(tmp_path: Path) -> None:
    report = _written(tmp_path, "n1", "n2")
    kept = tmp_path / "kept.txt"
    run = run_cli(["report", str(report), "--keep", "2", "--hostfile", str(kept)])
    assert run.returncode == 3 and kept.read_text() == ""
    assert "NO CHOICE: 1 healthy host(s) of 3, 2 needed" in run.stdout
    assert "dropped n1: NCCL008" in run.stdout and "dropped n2: NCCL008" in run.stdout


def test_bad_keep_is_one_line_and_exit_2(tmp_path: Path) -> None:
    report = _written(tmp_path)
    for args, says in ((["--keep", "0"], "--keep"), (["--keep", "²"], "--keep"),
                       (["--hostfile", str(tmp_path / "k.txt")], "--hostfile needs --keep")):
        run = run_cli(["report", str(report), *args])
        assert run.returncode == 2 and says in run.stderr and "Traceback" not in run.stderr, run.stderr


def test_a_report_written_before_rankings_existed_is_ranked_on_the_spot(tmp_path: Path) -> None:
    report = _written(tmp_path, "n3", old=True)
    assert json_report.load(report).host_ranking is None
    kept = tmp_path / "kept.txt"
    run = run_cli(["report", str(report), "--keep", "1", "--hostfile", str(kept)])
    assert run.returncode == 0 and kept.read_text() == "n1\n", run.stdout + run.stderr
    assert "dropped n3: NCCL008" in run.stdout and "dropped n2: spare, not needed" in run.stdout
