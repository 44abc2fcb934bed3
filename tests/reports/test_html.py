"""The HTML renderer on hand-made reports: escaping, self-containment, what-to-do, drift, matrix."""

from __future__ import annotations

import base64
import hashlib
import html as htmllib
import re

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


def test_user_text_is_escaped_everywhere_outside_the_two_scripts() -> None:
    evil = '<script>alert("x")</script><img src=x onerror=alert(1)>'
    report = _report([{"A": evil}, {"A": "ok"}],
                     [Finding("NCCL001", Severity.ERROR, evil, hint=evil, ranks=[0], hosts=[evil])])
    page = html.render(report)
    body = page.split('<script type="application/json"')[0]
    assert "<img" not in body and "alert(\"x\")</script>" not in body and "<b>job</b>" not in body
    assert "&lt;script&gt;alert(&#34;x&#34;)&lt;/script&gt;" in body
    figures = page.split('id="pf-figures">', 1)[1].split("</script>", 1)[0]
    assert "<" not in figures and ">" not in figures  # tojson escapes them, so nothing can close the block


def test_scripts_are_inline_once_and_allowed_by_their_csp_hash() -> None:
    page = html.render(_report([{}], []))
    assert "<script src" not in page and "<link" not in page
    policy = htmllib.unescape(re.search(r'Content-Security-Policy" content="([^"]+)"', page).group(1))
    csp = re.search(r"script-src ([^;]+);", policy).group(1).split()
    scripts = re.findall(r"<script>(.*?)</script>", page, flags=re.S)
    assert len(scripts) == 2 and len(scripts[0]) > 1_000_000  # plotly.js, embedded once
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
    figure = charts.matrix_figure(report, {f.rank: f.host for f in report.ranks})
    trace = figure["data"][0]
    assert trace["x"] == ["ENV001", "NCCL001", "RUN003"] and trace["y"] == ["n1", "n2", "n3"]
    assert trace["z"] == [[0, 0, 3], [0, 4, 3], [0, 0, 3]]
    assert "n2 · NCCL001: ERROR" in trace["text"][1][1]


def test_group_chart_draws_the_sibling_median_and_the_expected_rate() -> None:
    from tests.helpers.synthetic import probe_results

    results = probe_results("tp4", {r: f"n{r // 2}" for r in range(4)}, ops=("all_reduce",), sizes=(1 << 20,))
    figure = charts.groups_figure("tp", results, expected=300.0)
    names = [trace["name"] for trace in figure["data"]]
    assert names == ["all_reduce @ 1 MiB", "all_reduce sibling median", "expected 300 GB/s"]
    assert charts.groups_figure("tp", results, expected=None)["data"][-1]["name"] == "all_reduce sibling median"
