"""The run, top to bottom, as DESIGN.md's eight steps. The one place that knows their order.

1. World      where this rank sits (world.py)
2. Facts      what this rank sees, every gatherer under a deadline (facts/)
3. Local      checks of one rank's facts (checking.py)
4. Exchange   every rank reports to rank 0 over the c10d store or --out-dir (exchange.py)
   Reach      hosts probe each other's chosen address, bounded fan-out (reachability.py)
5. Cross      checks over all ranks' facts, on rank 0
6. Go/no-go   rank 0 tells every rank whether the probes may start
7. Probes     collectives on every mesh dimension (probes/)
8. Verdict    rank 0 renders every report from one JobReport; every rank exits with its code
"""

from __future__ import annotations

import datetime
import os
import signal
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from types import FrameType
from typing import Any

from preflight.checks.ports import foreign_store
from preflight.checks.run_findings import (
    gatherer_failed,
    probes_not_started,
    run_interrupted,
    store_did_not_form,
    unreadable_payload,
)
from preflight.lib import secrets
from preflight.lib.mesh_shape import mesh_text
from preflight.model import CheckOutcome, ExitCode, Finding, JobReport, RankFacts, ReportMeta, Severity, World
from preflight.options import RunOptions
from preflight.probes import orchestrate as probes
from preflight.probes.nominal import annotate as annotate_nominal_rates
from preflight.registry import (
    CROSS,
    LOCAL,
    CheckContext,
    Tags,
    merge_findings,
    merge_outcomes,
    run_checks,
    select_checks,
)
from preflight.reports import write_reports
from preflight.steps.exchange import Collected, Exchange, RankPayload
from preflight.steps.gather import GatherOptions, gather_facts
from preflight.steps.launchers import resolve_world
from preflight.steps.phases import PhaseDisplay, phase_display
from preflight.steps.tcp_reach import Reachability
from preflight.steps.verdict import bad_hosts, decide_exit_code, explain_verdict, verdict_text

# Seconds a non-zero rank waits for rank 0 beyond rank 0's own deadlines (rendering, skew).
VERDICT_MARGIN_S = 30.0
# Reachability: one TCP connect's deadline (at most --check-timeout), and each wait for peers.
REACH_CONNECT_S = 2.0
REACH_WAIT_S = 5.0


class Interrupted(Exception):
    """SIGTERM / SIGINT arrived: finish with what is known, verdict incomplete."""


@dataclass
class RunState:
    """What the steps have produced so far; enough to write a report at any point."""

    world: World
    options: RunOptions
    started: float = field(default_factory=time.time)
    phases: dict[str, float] = field(default_factory=dict)
    facts: RankFacts | None = None
    findings: list[Finding] = field(default_factory=list)
    outcomes: list[CheckOutcome] = field(default_factory=list)
    all_facts: list[RankFacts] = field(default_factory=list)
    missing: list[int] = field(default_factory=list)
    probe_results: list[Any] = field(default_factory=list)
    interrupted: str = ""
    progress: PhaseDisplay | None = None  # rank 0's live phase display (None elsewhere and under --quiet)


def run(options: RunOptions, env: Mapping[str, str] | None = None) -> int:
    """Run preflight as this process's rank; return the exit code every rank shares."""
    world = resolve_world(env)  # step 1; BadInput propagates to the CLI: one line, exit 2
    options = options.for_world(world.world_size)  # the mesh resolved; a bad one for this WORLD_SIZE: exit 2 too
    _import_torch_quietly()
    if options.run_id:
        world.run_id = options.run_id
    state = RunState(world, options, progress=phase_display(world.rank, options.reports.quiet))
    exchange = Exchange(world, options.timeout_s, options.out_dir)
    previous = _install_signal_handlers()
    try:
        return _run_steps(state, exchange)
    finally:
        _restore_signal_handlers(previous)


def _run_steps(state: RunState, exchange: Exchange) -> int:
    world, options = state.world, state.options
    ctx = CheckContext(world_size=world.world_size, backend=options.backend,
                       mesh=[(d.name, d.size) for d in options.mesh])
    try:
        with _phase(state, "facts"):
            state.facts = gather_facts(world, _gather_options(world, options))  # step 2
        with _phase(state, "local checks"):
            local = select_checks(LOCAL, options.only, options.skip)  # step 3
            found, outcomes = run_checks(local, state.facts, ctx, options.check_timeout_s,
                                         rank=world.rank, host=world.host)
            state.findings += found
            state.outcomes += outcomes
        with _phase(state, "exchange"):
            exchange.open()  # step 4
            # Secrets get their digests only now, keyed by a random key the ranks share
            # through the store and no report ever holds (see preflight/secrets.py).
            secrets.seal(state.facts.env, os.environ, secrets.agree_on_key(exchange.store))
            if exchange.store_error:
                store_failed = foreign_store if exchange.foreign else store_did_not_form
                state.findings += store_failed.report(rank=world.rank, host=world.host, reason=exchange.store_error)
            exchange.publish(_payload(state))
        reach = _reachability(state, exchange)
        reach.start()  # this host's listener, before rank 0 waits for anyone
        if world.rank != 0:
            with _phase(state, "reachability"):
                _take_part_in_reachability(state, reach)
            return _follow_rank_zero(state, exchange)
        with _phase(state, "collect"):
            _collect(state, exchange, ctx)
        with _phase(state, "reachability"):
            _check_reachability(state, reach, ctx)
        with _phase(state, "cross checks"):
            _cross_check(state, ctx)  # step 5
        go, reason = _decide_go(state)  # step 6
        exchange.announce("go", {"go": go, "reason": reason})
        if options.probes_enabled():
            with _phase(state, "probes"):
                _probe(state, exchange, go, reason)  # step 7
    except Interrupted as stop:
        state.interrupted = str(stop)
        if world.rank != 0:
            return int(ExitCode.INCOMPLETE)
    return _finish(state, exchange)  # step 8


def _import_torch_quietly() -> None:
    """Import torch.distributed here (the slow import), not inside a gatherer's deadline.

    c10d prints a C++ stack trace per failed store connection at ERROR level; preflight
    reports the failure in one line itself. The level is read once at import, so it is set
    only for the import and the environment the checks see stays the user's own.
    """
    if "TORCH_CPP_LOG_LEVEL" in os.environ:
        import torch.distributed
        return
    os.environ["TORCH_CPP_LOG_LEVEL"] = "FATAL"
    try:
        import torch.distributed  # noqa: F401
    finally:
        del os.environ["TORCH_CPP_LOG_LEVEL"]


def _follow_rank_zero(state: RunState, exchange: Exchange) -> int:
    """A non-zero rank: wait for go, take part in the probes, then adopt rank 0's verdict."""
    options = state.options
    if not exchange.has_channel():
        print(f"preflight: rank {state.world.rank}: cannot reach rank 0: {exchange.store_error}; "
              f"exit {int(ExitCode.INCOMPLETE)}")
        return int(ExitCode.INCOMPLETE)
    decision = exchange.wait_for("go", options.timeout_s + VERDICT_MARGIN_S)
    if decision and decision.get("go") and options.probes_enabled():
        probes.run_probes(state.world, options, exchange.store)
    verdict = exchange.wait_for("verdict", options.timeout_s + options.probe_timeout_s + VERDICT_MARGIN_S)
    exchange.acknowledge()
    if verdict is None:
        why = f": {exchange.store_error}" if exchange.store_error else ""
        print(f"preflight: rank {state.world.rank}: no verdict from rank 0 "
              f"({state.world.master_addr}:{state.world.master_port}){why}; exit {int(ExitCode.INCOMPLETE)}")
        return int(ExitCode.INCOMPLETE)
    return int(verdict["exit_code"])


def _reachability(state: RunState, exchange: Exchange) -> Reachability:
    """This rank's part in the reachability step; inert without a store or when network checks are off."""
    options = state.options
    wanted = Tags.NETWORK not in options.skip and (not options.only or Tags.NETWORK in options.only)
    assert state.facts is not None
    return Reachability(exchange.store if wanted else None, state.facts, seed=state.world.run_id,
                        connect_timeout_s=min(REACH_CONNECT_S, options.check_timeout_s))


def _take_part_in_reachability(state: RunState, reach: Reachability) -> None:
    """A non-zero rank (if it speaks for its host): probe the peers the roster assigns, then keep listening."""
    reach.probe_peers(state.options.timeout_s + REACH_WAIT_S)  # the roster comes after rank 0's collect
    reach.finish(REACH_WAIT_S + reach.connect_timeout_s)


def _check_reachability(state: RunState, reach: Reachability, ctx: CheckContext) -> None:
    """Rank 0: publish the roster of listeners, probe its own peers, keep every host's result in its facts."""
    if reach.store is None or state.facts is None:
        return
    roster = reach.publish_roster(sorted({f.host for f in state.all_facts}), REACH_WAIT_S)
    reach.probe_peers(REACH_WAIT_S)
    ctx.reachability = reach.collect(roster, REACH_WAIT_S + reach.connect_timeout_s)
    reach.finish(0.0)


def _collect(state: RunState, exchange: Exchange, ctx: CheckContext) -> None:
    options = state.options
    collected = exchange.collect(options.timeout_s)
    state.all_facts, remote_findings, remote_outcomes = _unpack(collected, state)
    state.findings += remote_findings
    state.outcomes += remote_outcomes
    state.missing = collected.missing(state.world.world_size)
    ctx.duplicate_ranks = collected.duplicates
    for name, (reason, ranks, hosts) in _gather_errors(state.all_facts).items():
        state.findings += gatherer_failed.report(name=name, reason=reason, ranks=ranks, hosts=hosts)


def _cross_check(state: RunState, ctx: CheckContext) -> None:
    options = state.options
    cross = select_checks(CROSS, options.only, options.skip)
    found, outcomes = run_checks(cross, state.all_facts, ctx, options.check_timeout_s,
                                 rank=0, host=state.world.host)
    state.findings += found
    state.outcomes += outcomes


def _unpack(collected: Collected, state: RunState) -> tuple[list[RankFacts], list[Finding], list[CheckOutcome]]:
    """Rank 0's own state plus every peer's payload, validated where it enters."""
    all_facts = [state.facts] if state.facts else []
    findings: list[Finding] = []
    outcomes: list[CheckOutcome] = []
    for rank, payload in sorted(collected.payloads.items()):
        if rank == 0:
            continue
        all_facts.append(payload.facts)
        findings += payload.findings
        outcomes += payload.outcomes
    for rank, reason in sorted(collected.bad_payloads.items()):
        findings += unreadable_payload.report(rank=rank, reason=reason)
    return sorted(all_facts, key=lambda f: f.rank), findings, outcomes


def _gather_errors(all_facts: list[RankFacts]) -> dict[str, tuple[str, list[int], list[str]]]:
    grouped: dict[str, tuple[str, list[int], list[str]]] = {}
    for facts in all_facts:
        for name, reason in facts.gather_errors.items():
            entry = grouped.setdefault(name, (reason, [], []))
            entry[1].append(facts.rank)
            entry[2].append(facts.host)
    return grouped


def _decide_go(state: RunState) -> tuple[bool, str]:
    """Probes never start on a world known to be broken: they would only hang."""
    if state.missing:
        return False, f"{len(state.missing)} rank(s) did not report"
    errors = [f for f in state.findings if f.severity == Severity.ERROR]
    if errors:
        return False, f"{len(errors)} error finding(s), first {errors[0].check_id}"
    return True, "world complete"


def _probe(state: RunState, exchange: Exchange, go: bool, reason: str) -> None:
    if not go:
        state.findings += probes_not_started.report(reason=reason)
        return
    outcome = probes.run_probes(state.world, state.options, exchange.store)
    annotate_nominal_rates(outcome.results, state.all_facts)
    state.probe_results += outcome.results
    state.findings += outcome.findings


def _finish(state: RunState, exchange: Exchange) -> int:
    """Rank 0: build the JobReport, render it everywhere, publish the exit code."""
    if state.interrupted:
        state.findings += run_interrupted.report(reason=state.interrupted)
    report = build_report(state)
    # Reports first: once the verdict is out, peers exit, and a launcher such as torchrun's
    # agent stops the remaining workers, rank 0 included.
    write_reports(report, state.options.reports)
    if state.options.verdict_file:
        Path(state.options.verdict_file).write_text(f"{report.exit_code}\n")
    exchange.announce("verdict", {"exit_code": report.exit_code, "verdict": report.verdict})
    try:
        exchange.wait_for_acknowledgements(len(state.all_facts) - 1, timeout_s=5.0)
    except Interrupted:
        pass  # the verdict is out and the reports are written; a launcher stopping us now changes nothing
    return report.exit_code


def build_report(state: RunState) -> JobReport:
    """The one JobReport every renderer reads."""
    world, options = state.world, state.options
    silenced = set(options.silence)
    findings = [f for f in merge_findings(state.findings) if f.check_id not in silenced]
    code = decide_exit_code(findings, strict=options.strict, interrupted=bool(state.interrupted))
    if state.missing and code != ExitCode.FAILED:
        code = ExitCode.FAILED  # a missing rank fails the run even when RANK001 is silenced
    finished = time.time()
    facts = state.all_facts or ([state.facts] if state.facts else [])
    meta = ReportMeta(
        launcher=world.launcher,
        job_id=world.job_id,
        run_id=world.run_id,
        world_size=world.world_size,
        num_nodes=world.num_nodes,
        master_addr=world.master_addr,
        master_port=world.master_port,
        restart_count=world.restart_count,
        mesh=mesh_text(options.mesh),  # resolved, the derived dp included
        backend=options.backend,
        command_line=options.command_line,
        started_at=_iso(state.started),
        finished_at=_iso(finished),
        duration_s=round(finished - state.started, 3),
        versions=state.facts.versions.known() if state.facts else {},
        phases=dict(state.phases),
        expected_busbw_gbps=dict(options.expect),
    )
    return JobReport(
        meta=meta,
        ranks=facts,
        findings=findings,
        checks=merge_outcomes(state.outcomes),
        probes=list(state.probe_results),
        missing_ranks=list(state.missing),
        bad_hosts=bad_hosts(findings, sorted({f.host for f in facts})),
        verdict=verdict_text(code, findings),
        exit_code=int(code),
        why=explain_verdict(code, findings),
    )


def _payload(state: RunState) -> RankPayload:
    assert state.facts is not None
    return RankPayload(state.world.rank, state.facts, list(state.findings), list(state.outcomes))


def _gather_options(world: World, options: RunOptions) -> GatherOptions:
    return GatherOptions(
        timeout_s=options.check_timeout_s,
        sysfs_root=options.sysfs_root,
    )


class _phase:
    """Times one step into state.phases (shown in the report's metadata)."""

    def __init__(self, state: RunState, name: str) -> None:
        self.state, self.name = state, name

    def __enter__(self) -> None:
        self.started = time.perf_counter()
        if self.state.progress:
            self.state.progress.start(self.name)

    def __exit__(self, exc_type: object, *exc: object) -> None:
        self.state.phases[self.name] = round(time.perf_counter() - self.started, 4)
        if self.state.progress:
            self.state.progress.done(self.name, self.state.phases[self.name], failed=exc_type is not None)


def _iso(timestamp: float) -> str:
    return datetime.datetime.fromtimestamp(timestamp, datetime.timezone.utc).isoformat(timespec="seconds")


def _raise_interrupted(signum: int, frame: FrameType | None) -> None:
    raise Interrupted(f"received {signal.Signals(signum).name}")


def _install_signal_handlers() -> dict[int, Any]:
    previous = {}
    for signum in (signal.SIGTERM, signal.SIGINT):
        try:
            previous[signum] = signal.signal(signum, _raise_interrupted)
        except ValueError:  # not the main thread (tests): keep the defaults
            pass
    return previous


def _restore_signal_handlers(previous: dict[int, Any]) -> None:
    for signum, handler in previous.items():
        signal.signal(signum, handler)
