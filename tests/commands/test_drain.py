"""commands/drain.py: which nodes a report or the history drains, the reason's limits, the flags.

The real scontrol against a real slurmctld is tests/launchers/test_drain.py; here the choice of
nodes and the reason, from JobReports built by the verdict step itself (tests/helpers/facts.py).
"""

from __future__ import annotations

from pathlib import Path

from preflight.commands.drain import MAX_REASON, Drain, from_flaky, from_report, reason_text
from preflight.model import Finding, Severity
from preflight.model.history_records import Flaky
from preflight.reports.json import write as write_json
from tests.helpers.facts import built_report, host_facts
from tests.helpers.ranks import run_cli


def _finding(check_id: str, severity: Severity, hosts: list[str], message: str = "bad", blames: bool = True) -> Finding:
    return Finding(check_id=check_id, severity=severity, message=message, hosts=hosts, blames_host=blames)


def test_a_failed_run_drains_the_blamed_host_with_its_first_error_and_never_a_warned_one() -> None:
    report = built_report(host_facts(["n1", "n2", "n3"]), [
        _finding("NCCL008", Severity.ERROR, ["n2"], "NCCL_SOCKET_IFNAME=nosuch0 matches no interface on n2"),
        _finding("NET007", Severity.ERROR, ["n2"], "second error"),
        _finding("LAYOUT005", Severity.WARN, ["n3"], "a warning")])
    assert [d.node for d in from_report(report)] == ["n2"]
    [drain] = from_report(report)
    assert drain.reason == "preflight NCCL008: NCCL_SOCKET_IFNAME=nosuch0 matches no interface on n2"
    assert drain.argv() == ["scontrol", "update", "NodeName=n2", "State=DRAIN", f"Reason={drain.reason}"]
    # Asked for: warnings that name some hosts drain those too.
    assert [d.node for d in from_report(report, warnings=True)] == ["n2", "n3"]


def test_an_error_of_the_job_itself_drains_nothing() -> None:
    # Every host named, a check that does not blame hosts: the job's configuration, no node's fault.
    report = built_report(host_facts(["n1", "n2"]), [_finding("ENV001", Severity.ERROR, ["n1", "n2"], blames=False)])
    assert from_report(report) == [] and from_report(report, warnings=True) == []


def test_the_reason_is_one_printable_line_within_slurms_limit() -> None:
    reason = reason_text("BW003", 'slow "link"\n\tto n2 ' + "é" * 10 + "x" * 500)
    assert len(reason) == MAX_REASON and reason.endswith("...") and '"' not in reason and "\n" not in reason
    assert reason.startswith("preflight BW003: slow 'link' to n2 ??????????")
    assert Drain("n2", reason).shown().startswith('scontrol update NodeName=n2 State=DRAIN Reason="preflight BW003')


def test_flaky_hosts_drain_with_their_record() -> None:
    [drain] = from_flaky([Flaky("n4", 3, 10, ["r9", "r7", "r2", "r1"]), Flaky("bad name;rm", 3, 3, ["r"])])
    assert drain == Drain("n4", "preflight HIS003: failed 3 of its last 10 runs (r9, r7, r2)")


def test_report_drain_is_a_dry_run_by_default_and_yes_needs_drain(tmp_path: Path) -> None:
    report = built_report(host_facts(["n1", "n2", "n3"]), [_finding("NCCL008", Severity.ERROR, ["n2"], "gone")])
    path = tmp_path / "r.json"
    write_json(report, str(path))
    dry = run_cli(["report", str(path), "--drain"], env={"PATH": str(tmp_path)})  # no scontrol reachable
    assert dry.returncode == 0, dry.stderr
    assert 'scontrol update NodeName=n2 State=DRAIN Reason="preflight NCCL008: gone"' in dry.stdout.splitlines()
    # --yes without scontrol on PATH: one line, exit 1 (one node not drained).
    missing = run_cli(["report", str(path), "--drain", "--yes"], env={"PATH": str(tmp_path)})
    assert missing.returncode == 1 and "scontrol not found" in missing.stderr and "Traceback" not in missing.stderr
    refused = run_cli(["report", str(path), "--yes"])
    assert refused.returncode == 2 and "--yes needs --drain" in refused.stderr


def test_no_node_to_drain_says_why() -> None:
    """Issue 45: `report --drain` said "no node to drain" without why."""
    from preflight.commands.drain import none_from_report
    from preflight.model import ExitCode

    hosts = host_facts(["n1", "n2", "n3"])
    passed = built_report(hosts, [_finding("BW003", Severity.WARN, ["n2"], "slow")])
    assert none_from_report(passed) == ("the run passed with no error; only warnings name nodes "
                                        "(--drain-warnings drains those too)")
    everyone = _finding("ENV001", Severity.ERROR, ["n1", "n2", "n3"], "launchers differ", blames=False)
    shared = built_report(hosts, [everyone])
    assert shared.exit_code == int(ExitCode.FAILED)
    assert none_from_report(shared).startswith("the error is the job's, not a node's (ENV001")
    incomplete = built_report(hosts, [_finding("RUN012", Severity.COULD_NOT_RUN, [], "one rank")])
    assert none_from_report(incomplete).startswith("the run is incomplete (exit 4)")
