"""The real 4-rank run with planted faults (see conftest.py): every format it wrote, without a browser."""

from __future__ import annotations

import json
import re
import xml.etree.ElementTree as ET

from preflight.model import Severity
from preflight.reports.common import exclude_text
from tests.reports.conftest import IMG_PAYLOAD, SCRIPT_PAYLOAD, PlantedRun


def test_every_rank_exits_with_the_failed_verdict(planted_run: PlantedRun) -> None:
    codes = {rank: run.returncode for rank, run in planted_run.ranks.items()}
    assert codes == {0: 3, 1: 3, 2: 3, 3: 3}, planted_run.ranks[0].stderr


def test_the_bad_value_names_its_host_and_the_exclude_file_lists_it(planted_run: PlantedRun) -> None:
    report = planted_run.report()
    nccl = [f for f in report.findings if f.check_id == "NCCL001"]
    assert nccl and nccl[0].ranks == [3] and nccl[0].hosts == ["node04"]
    assert "node04" in report.bad_hosts
    lines = planted_run.exclude.read_text().splitlines()
    assert lines == report.bad_hosts
    assert all(line.strip() == line and line for line in lines)


def test_junit_has_one_testcase_per_check_and_counts_match_the_findings(planted_run: PlantedRun) -> None:
    report = planted_run.report()
    root = ET.parse(planted_run.junit).getroot()
    suite = root.find("testsuite")
    assert suite is not None
    cases = suite.findall("testcase")
    ids = {c.check_id for c in report.checks} | {f.check_id for f in report.findings}
    assert sorted(case.get("name", "").split(":")[0] for case in cases) == sorted(ids)
    failing = {f.check_id for f in report.findings if f.severity == Severity.ERROR}
    skipping = {f.check_id for f in report.findings if f.severity == Severity.COULD_NOT_RUN} - failing
    skipping |= {c.check_id for c in report.checks if c.status == Severity.SKIPPED}  # did not apply here
    failed_cases = {c.get("name", "").split(":")[0] for c in cases if c.find("failure") is not None}
    skipped_cases = {c.get("name", "").split(":")[0] for c in cases if c.find("skipped") is not None}
    assert failed_cases == failing and "NCCL001" in failed_cases
    assert skipped_cases == skipping and "RUN003" in skipped_cases  # probes not started: could not run
    assert suite.get("tests") == str(len(ids)) == root.get("tests")
    assert suite.get("failures") == str(len(failing)) and suite.get("skipped") == str(len(skipping))
    nccl = next(c for c in cases if c.get("name", "").startswith("NCCL001"))
    failure = nccl.find("failure")
    assert failure is not None
    hint = next(f.hint for f in report.findings if f.check_id == "NCCL001")
    # The message is the specific finding, culprit first; the hint is in the body.
    assert failure.get("message").startswith("rank 3 on node04: ") and hint in (failure.text or "")


def test_text_report_is_what_stdout_showed_and_names_the_drift(planted_run: PlantedRun) -> None:
    text = planted_run.text.read_text()
    assert text.startswith("preflight: FAILED (exit 3):")
    assert text == planted_run.ranks[0].stdout  # stdout is not a TTY here: the same plain text
    assert "NCCL001" in text
    assert f"bad hosts: {exclude_text(planted_run.report())}" in text and "node04" in exclude_text(planted_run.report())
    drift = text.split("environment drift", 1)[1]
    assert "NCCL_DEBUG" in drift and "'INFO' on rank 2 (node03)" in drift
    assert "PREFLIGHT_TEST_NOTE" in drift and SCRIPT_PAYLOAD in drift and IMG_PAYLOAD in drift
    assert "\nRANK " not in drift  # a launcher's per-rank variable is not drift


def test_rank_zero_logs_one_line_per_phase_and_other_ranks_none(planted_run: PlantedRun) -> None:
    lines = [line for line in planted_run.ranks[0].stderr.splitlines() if line.startswith("preflight: ")]
    phases = [line.split()[1] for line in lines if " done in " in line]
    assert phases[:2] == ["facts", "local"] and "exchange" in phases and "cross" in phases, lines
    for rank in (1, 2, 3):
        assert " done in " not in planted_run.ranks[rank].stderr


def test_html_of_the_run_is_self_contained_and_escaped(planted_run: PlantedRun) -> None:
    page = planted_run.html.read_text()
    assert "<script src" not in page and "<link" not in page and "cdn." not in page.split("<script>")[0]
    assert page.count("<script>") == 1 and "plotly" not in page.lower()  # the filters' script; charts are SVG
    for path in (planted_run.html, planted_run.probed_html):  # 4 ranks, with and without probes
        assert path.stat().st_size < 1_500_000  # 4.8 MB when plotly.js was embedded
    assert SCRIPT_PAYLOAD not in page and IMG_PAYLOAD not in page
    assert "&lt;script&gt;window.__pwned=2&lt;/script&gt;" in page


def test_rerender_keeps_the_runs_exit_code(planted_run: PlantedRun) -> None:
    assert planted_run.rerender_code == 3, planted_run.rerender_stdout
    assert planted_run.probed_html.exists() and planted_run.probed_junit.exists()


def test_an_unauthenticated_run_over_four_hosts_says_so_in_every_report(planted_run: PlantedRun) -> None:
    """No PREFLIGHT_SECRET on a run over node01..node04: PORT005 (info), and the run metadata says `no`."""
    report = planted_run.report()
    [finding] = [f for f in report.findings if f.check_id == "PORT005"]
    assert finding.severity == Severity.INFO and "4 hosts" in finding.message and "PREFLIGHT_SECRET" in finding.hint
    assert json.loads(planted_run.json.read_text())["meta"]["authenticated"] is False
    assert "authenticated: no (no PREFLIGHT_SECRET" in planted_run.text.read_text()
    html = planted_run.html.read_text()
    assert re.search(r"<th>authenticated</th><td>no \(no PREFLIGHT_SECRET", html), html[:3000]
