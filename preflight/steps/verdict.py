"""Step 9: from what the steps produced to one JobReport, one verdict, one exit code, the bad hosts.

`RunRecord` is what the runner has gathered so far, enough to build a report at any point
(an interrupt, a missing peer); `build_report` turns it into the JobReport every renderer
reads, after merging the same finding from many ranks and dropping `--silence`d ids.
"""

from __future__ import annotations

import datetime
import time
from collections.abc import Sequence
from pathlib import Path

from msgspec import Struct, field

from preflight.checks.run_findings import rank_died, rank_zero_lost
from preflight.lib.grouping import ranks_per_host
from preflight.lib.mesh_shape import mesh_text
from preflight.lib.shorten import shorten
from preflight.model import (
    CheckOutcome,
    ExitCode,
    Finding,
    JobReport,
    RankFacts,
    ReachabilityOutcome,
    ReportMeta,
    Severity,
    World,
    culprit_order,
)
from preflight.model.probe_outcome import ProbeOutcome
from preflight.model.storage import StorageSection
from preflight.options import RunOptions
from preflight.registry import Tags
from preflight.reports import json as json_report
from preflight.steps.check_results import every_selected_outcome, merge_findings
from preflight.steps.host_choice import rank_hosts


class RunRecord(Struct):
    """What the steps have produced so far; enough to write a report at any point."""

    world: World
    options: RunOptions
    started: float = field(default_factory=time.time)
    phases: dict[str, float] = field(default_factory=dict)
    facts: RankFacts | None = None  # this rank's own
    findings: list[Finding] = field(default_factory=list)
    outcomes: list[CheckOutcome] = field(default_factory=list)
    all_facts: list[RankFacts] = field(default_factory=list)  # rank 0: every rank that reported
    missing: list[int] = field(default_factory=list)
    reachability: ReachabilityOutcome | None = None  # step 5's outcome, on rank 0
    probes: ProbeOutcome | None = None  # step 8's outcome, where it ran
    storage: StorageSection | None = None  # the storage family's section, on rank 0 (steps/storage.py)
    interrupted: str = ""
    nonce: str = ""  # the run's identity agreed through the store (channel/exchange.py)
    authenticated: bool = False  # this run had a run secret (PREFLIGHT_SECRET, channel/run_auth.py)
    report: JobReport | None = None  # step 9's verdict, once built (or, in preflight.check, read from rank 0)


def build_report(record: RunRecord) -> JobReport:
    """The one JobReport every renderer reads."""
    world, options = record.world, record.options
    silenced = set(options.silence)
    findings = [f for f in merge_findings(record.findings) if f.check_id not in silenced]
    checks = every_selected_outcome(record.outcomes, findings, options.only, options.skip, _not_run(record))
    unchecked = [f for f in families_unchecked(checks, options.only) if f.check_id not in silenced]
    if unchecked:  # an --only family that checked nothing is could-not-run: the outcomes say so too
        findings = merge_findings(findings + unchecked)
        checks = every_selected_outcome(record.outcomes, findings, options.only, options.skip, _not_run(record))
    code = decide_exit_code(findings, strict=options.strict, interrupted=bool(record.interrupted))
    if record.missing and code != ExitCode.FAILED:
        code = ExitCode.FAILED  # a missing rank fails the run even when RANK001 is silenced
    finished = time.time()
    facts = record.all_facts or ([record.facts] if record.facts else [])
    meta = ReportMeta(
        launcher=world.launcher,
        job_id=world.job_id,
        run_id=world.run_id,
        world_size=world.world_size,
        num_nodes=world.num_nodes,
        master_addr=world.master_addr,
        master_port=world.master_port,
        restart_count=world.restart_count,
        mesh=mesh_text(options.probes.mesh),  # resolved, the derived dp included
        # the backend the probes used; one asked for by name when none was; never `auto`, which chose nothing
        backend=(record.probes.backend if record.probes and record.probes.backend
                 else "" if options.probes.backend == "auto" else options.probes.backend),
        backend_reason=record.probes.backend_reason if record.probes else "",
        command_line=options.command_line,
        started_at=_iso(record.started),
        finished_at=_iso(finished),
        duration_s=round(finished - record.started, 3),
        versions=record.facts.versions.known() if record.facts else {},
        phases=dict(record.phases),
        expected_busbw_gbps=dict(options.probes.expect),
        run_nonce=record.nonce,
        authenticated=record.authenticated,
    )
    report = JobReport(
        meta=meta,
        ranks=facts,
        findings=findings,
        checks=checks,
        probes=list(record.probes.results) if record.probes else [],
        probe_devices=list(record.probes.devices) if record.probes else [],
        device_probes=list(record.probes.device_rows) if record.probes else [],
        nccl=record.probes.nccl if record.probes else None,
        reachability=record.reachability,
        storage=record.storage,
        missing_ranks=list(record.missing),
        bad_hosts=bad_hosts(findings, sorted(ranks_per_host(facts))),  # (kept: the checks' texts counted them)
        verdict=verdict_text(code, findings),
        exit_code=int(code),
        why=explain_verdict(code, findings, checks),  # the same skips the check summary counts
    )
    report.host_ranking = rank_hosts(report)
    return report


def families_unchecked(checks: Sequence[CheckOutcome], only: Sequence[str]) -> list[Finding]:
    """RUN012 for each `--only` family whose every check was skipped: asked for, checked nothing.

    `--only gpu` on a machine without an NVIDIA driver: `no NVIDIA driver: --only gpu checked
    nothing`. The probe family speaks through its plan instead (probes/plan.py's reasons)."""
    from preflight.checks.run_findings import nothing_measured

    found = []
    for tag in only:
        tagged = [c for c in checks if c.tag == tag]
        if tag == Tags.PROBE or any(c.status != Severity.SKIPPED for c in tagged):
            continue
        reasons = [c.reason for c in tagged if c.reason]
        why = max(dict.fromkeys(reasons), key=reasons.count) if reasons else "no check of it applies here"
        found += nothing_measured.report(reason=f"{why}: --only {tag} checked nothing", what=f"--only {tag}")
    return found


def _not_run(record: RunRecord) -> dict[str, str]:
    """Tags whose step did not run this time -> why: their engine checks are skipped, not passed."""
    not_run = {}
    if record.probes is None:
        why = "the probes did not run" + (f" ({record.interrupted})" if record.interrupted else "")
        not_run = {Tags.PROBE: why, Tags.GPU_PROBE: why}
    elif not record.probes.results and record.world.rank == 0:
        not_run = {Tags.PROBE: "no collective was measured"}  # RUN012 or a probe finding says why
    if not record.options.history.url:
        not_run[Tags.HISTORY] = "no --history"
    if record.options.storage is None:
        not_run[Tags.STORAGE] = "no --storage"
    return not_run


def _iso(timestamp: float) -> str:
    return datetime.datetime.fromtimestamp(timestamp, datetime.timezone.utc).isoformat(timespec="seconds")

VERDICT_TEXT = {
    ExitCode.PASSED: "passed",
    ExitCode.WARNINGS_STRICT: "passed with warnings (--strict)",
    ExitCode.FAILED: "failed",
    ExitCode.INCOMPLETE: "incomplete",
}


def decide_exit_code(findings: Sequence[Finding], *, strict: bool, interrupted: bool = False) -> ExitCode:
    """3 on any error, else 4 when something could not run or the run was cut short,
    else 1 on warnings under --strict, else 0."""
    severities = {f.severity for f in findings}
    if Severity.ERROR in severities:
        return ExitCode.FAILED
    if Severity.COULD_NOT_RUN in severities or interrupted:
        return ExitCode.INCOMPLETE
    if strict and Severity.WARN in severities:
        return ExitCode.WARNINGS_STRICT
    return ExitCode.PASSED


def verdict_text(code: ExitCode, findings: Sequence[Finding]) -> str:
    """`passed`, `passed with warnings`, `failed`, `incomplete`."""
    if code == ExitCode.PASSED and any(f.severity == Severity.WARN for f in findings):
        return "passed with warnings"
    return VERDICT_TEXT.get(code, "incomplete")


MAX_WHY_CHARS = 130  # with "preflight: FAILED (exit 3): " the verdict line stays under ~160 characters


def culprit_first(findings: Sequence[Finding]) -> Finding | None:
    """The finding the verdict line leads with: the first in the one order every view shows
    (model.culprit_order: worst severity, a culprit before where it showed, fewest ranks), so a
    rank that makes two groups slow (BW004) comes before the groups (BW003)."""
    return min(findings, key=culprit_order, default=None)


def explain_verdict(code: ExitCode, findings: Sequence[Finding], outcomes: Sequence[CheckOutcome] = ()) -> str:
    """One line: who is at fault first (rank, host), then what and how many findings.

    `rank 3 on vm: BW004 in slow groups of dimensions dp, tp ... (2 errors, 1 warning)`, bounded to
    MAX_WHY_CHARS. Checks that did not apply are counted as skipped, never as passed."""
    from preflight.reports.common import finding_counts, where

    parts = finding_counts(findings)  # the check summary's last line quotes the same counts
    if not parts:
        skipped = [o for o in outcomes if o.status == Severity.SKIPPED]
        if not skipped:
            return "every check passed"
        reasons = sorted({o.reason for o in skipped if o.reason})
        return f"every check that applied passed; {len(skipped)} skipped ({'; '.join(reasons) or 'did not apply'})"
    first = culprit_first([f for f in findings if f.severity.rank >= Severity.WARN.rank]) or findings[0]
    place = where(first)
    tail = f" ({', '.join(parts)})"
    head = f"{place}: {first.check_id} " if place else f"{first.check_id} "
    room = max(20, MAX_WHY_CHARS - len(head) - len(tail))
    message = shorten(first.message, room)  # words go, numbers and units never
    return head + message + tail


def bad_hosts(findings: Sequence[Finding], all_hosts: Sequence[str]) -> list[str]:
    """Hosts to exclude: those named by an error finding whose check blames hosts
    (`@check(..., blames_host=True)`, e.g. a missing rank or a dead link), or that names only some hosts;
    never the hosts of a `context_only` finding (a slow group: where it showed, not who caused it).

    An error on every host is the job's configuration, not a node's fault; excluding
    every node would help nobody.
    """
    everyone = set(all_hosts)
    bad: set[str] = set()
    for finding in findings:
        if finding.severity != Severity.ERROR or not finding.hosts or finding.context_only:
            continue
        named = set(finding.hosts)
        if finding.blames_host or not named >= everyone:
            bad |= named
    return sorted(bad)


def report_alone(record: RunRecord, out_dir: Path | None, reason: str) -> int:
    """Rank 0 is gone: this rank's own report (its facts, its findings, rank 0 lost) in --out-dir.

    Returns the code this rank exits with: its own report's, never a pass.
    """
    world = record.world
    record.findings += rank_zero_lost.report(rank=world.rank, master=f"{world.master_addr}:{world.master_port}",
                                             reason=reason[:300])
    report = record.report = build_report(record)
    if out_dir is not None:
        json_report.write(report, str(out_dir / f"rank-{world.rank}-report.json"))
    return report.exit_code


def amend_for_dead(report: JobReport, dead: dict[int, str], *, strict: bool = False) -> JobReport:
    """Rank 0's report once the launcher said which rank died (rank -> how: a signal, an exit code).

    A launcher that sees one worker die stops the others (torch's agent does), so rank 0's
    report was cut short: the ranks it was still waiting for were stopped, not faulty. The
    dead rank is named (RUN008); ranks the report calls missing other than the dead one are
    no longer blamed (RANK001 and missing_ranks keep only the dead); the verdict, exit code and
    bad hosts are decided again.
    """
    hosts = {facts.rank: facts.host for facts in report.ranks}
    findings = [f for f in report.findings if f.check_id != rank_missing_id()]
    for rank, how in sorted(dead.items()):
        findings += rank_died.report(rank=rank, host=hosts.get(rank, ""), how=how,
                                     when="under the launcher, which then stopped the other ranks")
    code = decide_exit_code(findings, strict=strict)
    report.findings = sorted(findings, key=culprit_order)
    report.missing_ranks = [r for r in report.missing_ranks if r in dead]
    report.exit_code = int(code)
    report.verdict = verdict_text(code, findings)
    report.why = explain_verdict(code, findings, report.checks)
    report.bad_hosts = bad_hosts(findings, sorted(set(hosts.values()) | {hosts.get(r, "") for r in dead} - {""}))
    report.host_ranking = rank_hosts(report)
    return report


def rank_missing_id() -> str:
    """RANK001's id, by reference (the engine names no check id as a string)."""
    from preflight.checks.rank_roster import missing_ranks
    from preflight.registry import all_checks

    return next(spec.id for spec in all_checks() if spec.func is missing_ranks)
