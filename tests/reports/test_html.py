"""The HTML renderer on hand-made reports: escaping, self-containment, what-to-do, drift, matrix."""

from __future__ import annotations

import base64
import hashlib
import html as htmllib
import re

import pytest

from preflight.model import CheckOutcome, Finding, JobReport, RankFacts, ReportMeta, Severity, World
from preflight.reports import charts, html
from preflight.reports.drift_table import env_drift


def _report(envs: list[dict[str, str]], findings: list[Finding]) -> JobReport:
    ranks = [RankFacts(rank=r, host=f"n{r + 1}", world=World("env", r, len(envs), host=f"n{r + 1}"), env=env)
             for r, env in enumerate(envs)]
    meta = ReportMeta(launcher="env", job_id="<b>job</b>", run_id="r", world_size=len(envs), num_nodes=len(envs),
                      master_addr="127.0.0.1", master_port=29500, command_line="preflight --html '<x>'")
    checks = [CheckOutcome("NCCL001", "nccl", "local", "t", Severity.OK), CheckOutcome("ENV001", "env", "cross",
                                                                                        "t", Severity.OK)]
    return JobReport(meta=meta, ranks=ranks, findings=findings, checks=checks, verdict="failed", exit_code=3,
                     why="1 error(s)")


def test_user_text_is_escaped_everywhere_outside_the_script() -> None:
    evil = '<script>alert("x")</script><img src=x onerror=alert(1)>`<b>in code</b>`'
    report = _report([{"A": evil}, {"A": "ok"}],
                     [Finding("NCCL001", Severity.ERROR, evil, hint=evil, ranks=[0], hosts=[evil])])
    page = html.render(report)
    body = page.split("<script>")[0]
    assert "<img" not in body and "alert(\"x\")</script>" not in body and "<b>job</b>" not in body
    assert "<b>in code</b>" not in body and "<code>&lt;b&gt;in code&lt;/b&gt;</code>" in body
    assert "&lt;script&gt;alert(&#34;x&#34;)&lt;/script&gt;" in body


def test_markdown_backticks_become_code_never_literal() -> None:
    report = _report([{}], [Finding("GPU003", Severity.ERROR, "lost", hint="reset it (`nvidia-smi -r`)", ranks=[0])])
    page = html.render(report)
    assert "<code>nvidia-smi -r</code>" in page and "`nvidia-smi -r`" not in page


def test_the_one_script_is_inline_small_and_allowed_by_its_csp_hash() -> None:
    page = html.render(_report([{}], []))
    assert "<script src" not in page and "<link" not in page
    policy = htmllib.unescape(re.search(r'Content-Security-Policy" content="([^"]+)"', page).group(1))
    csp = re.search(r"script-src ([^;]+);", policy).group(1).split()
    scripts = re.findall(r"<script>(.*?)</script>", page, flags=re.S)
    assert len(scripts) == 1 and len(scripts[0]) < 10_000  # the filters; the charts are inline SVG, no library
    for script in scripts:
        digest = base64.b64encode(hashlib.sha256(script.encode()).digest()).decode()
        assert f"'sha256-{digest}'" in csp
    assert "default-src 'none'" in page  # no network: no fetch, no CDN, no image from outside


def test_what_to_do_deduplicates_hints_and_puts_errors_first() -> None:
    findings = [
        Finding("NET001", Severity.WARN, "w", hint="check the cable", ranks=[0, 1, 2]),
        Finding("ENV001", Severity.ERROR, "a", hint="fix env", ranks=[0]),
        Finding("ENV002", Severity.ERROR, "b", hint="fix env", ranks=[1]),
        Finding("GPU001", Severity.ERROR, "c", hint="drain it", ranks=[5]),
        Finding("RUN003", Severity.COULD_NOT_RUN, "d", hint="fix the errors first"),
        Finding("INF001", Severity.INFO, "e", hint="fyi"),
    ]
    todos = html.what_to_do(_report([{}], findings))
    assert [t.hint for t in todos] == ["fix env", "drain it", "fix the errors first", "check the cable"]
    assert todos[0].check_ids == ["ENV001", "ENV002"] and todos[0].where == "ranks 0-1"


def test_drift_shows_only_differing_variables_and_not_per_rank_ones() -> None:
    envs = [{"SAME": "1", "RANK": str(r), "NCCL_DEBUG": "WARN", "SECRET_TOKEN": "<redacted>:aa"} for r in range(4)]
    envs[2]["NCCL_DEBUG"] = "INFO"
    envs[3]["SECRET_TOKEN"] = "<redacted>:bb"
    del envs[1]["SAME"]
    rows = {row.variable: row for row in env_drift(_report(envs, []))}
    assert set(rows) == {"NCCL_DEBUG", "SECRET_TOKEN", "SAME"}
    assert [(v.value, v.ranks) for v in rows["NCCL_DEBUG"].values] == [("WARN", "0-1,3"), ("INFO", "2")]
    assert [(v.value, v.ranks) for v in rows["SAME"].values] == [("1", "0,2-3"), ("(unset)", "1")]


def test_matrix_colours_each_host_by_the_worst_finding_and_job_wide_findings_everywhere() -> None:
    report = _report([{}, {}, {}], [
        Finding("NCCL001", Severity.WARN, "w", ranks=[1]),
        Finding("NCCL001", Severity.ERROR, "e", hosts=["n2"]),
        Finding("RUN003", Severity.COULD_NOT_RUN, "probes not started"),
    ])
    report.checks.append(CheckOutcome("GPU004", "gpu", "local", "t", Severity.SKIPPED, reason="no NVIDIA driver"))
    grid = charts.matrix(report, {f.rank: f.host for f in report.ranks})
    assert grid.checks == ["ENV001", "GPU004", "NCCL001", "RUN003"] and grid.hosts == ["n1", "n2", "n3"]
    severity = [[grid.cells[(h, c)][0] for c in grid.checks] for h in grid.hosts]
    ok, skip, err, cnr = Severity.OK, Severity.SKIPPED, Severity.ERROR, Severity.COULD_NOT_RUN
    assert severity == [[ok, skip, ok, cnr], [ok, skip, err, cnr], [ok, skip, ok, cnr]]
    assert "n2 · NCCL001: ERROR" in grid.cells[("n2", "NCCL001")][1]
    assert "SKIPPED (no NVIDIA driver)" in grid.cells[("n1", "GPU004")][1]
    page = html.render(report)
    assert page.count('class="cell sev-skipped"') == 3  # a grey cell per host, never green


def test_group_chart_labels_groups_by_ranks_and_hosts_with_the_median_and_expected_lines() -> None:
    from tests.helpers.synthetic import probe_results

    results = probe_results("tp4", {r: f"n{r // 2}" for r in range(4)}, ops=("all_reduce",), sizes=(1 << 20,))
    svg = charts.groups_svg("tp", results, expected=300.0)
    assert "ranks 0-3 on n[0-1]" in svg
    assert svg.count('class="median-line"') == 1 and svg.count('class="expected-line"') == 1
    assert 'class="expected-line"' not in charts.groups_svg("tp", results, expected=None)


def test_size_chart_shows_the_slowest_group_not_only_the_median() -> None:
    """Two groups, one at 7%: the median alone would sit halfway; the band's low edge is the straggler."""
    from msgspec.structs import replace

    from tests.helpers.synthetic import probe_results

    results = probe_results("dp2,tp2", {r: "vm" for r in range(4)}, ops=("all_reduce",), sizes=(1 << 20,))
    tp = [r for r in results if r.dim == "tp"]
    slow = [replace(tp[0], busbw_gbps=tp[1].busbw_gbps * 0.07), tp[1]]
    svg = charts.busbw_by_size_svg("tp", slow)
    assert 'class="band"' in svg and 'class="low"' in svg
    assert f"slowest {slow[0].busbw_gbps:.3g}" in svg


def test_matrix_past_its_host_limit_keeps_the_hosts_with_findings_and_draws_each_quiet_cell(monkeypatch) -> None:
    monkeypatch.setattr(charts, "MAX_MATRIX_HOSTS", 2)
    report = _report([{}, {}, {}, {}], [Finding("NCCL001", Severity.ERROR, "slow", ranks=[3])])
    grid = charts.matrix(report, {f.rank: f.host for f in report.ranks})
    assert grid.hosts == ["n1", "n4"] and grid.hidden_hosts == 2
    assert len(grid.cells) == 4 and sorted(grid.cells) == [(h, c) for h in ("n1", "n4") for c in ("ENV001", "NCCL001")]
    assert grid.cells[("n1", "NCCL001")] == (Severity.OK, "n1 · NCCL001: OK")
    assert grid.cells[("n4", "NCCL001")] == (Severity.ERROR, "n4 · NCCL001: ERROR\nslow")
    with pytest.raises(KeyError):
        grid.cells[("n2", "NCCL001")]  # not shown
    page = html.render(report)
    assert page.count('class="cell ') == 4
    assert '<td class="cell sev-ok" title="n1 · ENV001: OK"></td>' in page
