"""The run, top to bottom: the one place that knows the order of the steps.

1. world          where this rank sits, from the launcher's variables (steps/launchers.py)
2. facts          what this rank sees, every gatherer under a deadline (steps/gather/)
3. local checks   checks of this rank's facts (registry.py, checks/)
4. exchange       every rank publishes its payload; rank 0 collects them (channel/exchange.py)
5. reachability   hosts connect to each other's chosen address, bounded fan-out (steps/tcp_reach.py)
6. cross checks   checks over all ranks' facts, on rank 0
7. go/no-go       rank 0 tells every rank whether the probes may start
8. probes         collectives on every group of every mesh dimension (probes/)
9. verdict        rank 0 builds one JobReport, renders every format (steps/verdict.py, reports/),
                  and publishes the exit code every rank exits with

Rank 0 runs `_lead`, every other rank `_follow`; both read as the steps above. The phase
names in the report's `meta.phases` are the steps' names (step 4 is `exchange` on every rank
and `collect` on rank 0). SIGTERM/SIGINT arrive as `Interrupted` (commands/cli.py installs
the handlers): rank 0 still writes its report, marked incomplete.

Two front doors call it: `run` for the CLI (step 1 from the launcher's variables, its own
store and process groups), `run_in_job` for `preflight.check` (api.py: the job's store and
groups, and nothing exits the process).
"""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import msgspec

from preflight.channel import clock, keys, run_auth
from preflight.channel.exchange import Exchange, RankPayload
from preflight.channel.store_open import agree_on_key
from preflight.channel.wire import this_stamp
from preflight.checks import mesh_order
from preflight.checks.ports import foreign_store
from preflight.checks.run_findings import (
    options_disagree,
    probes_not_started,
    run_interrupted,
    stale_files_ignored,
    store_did_not_form,
    store_value_refused,
)
from preflight.lib import secrets, waiting
from preflight.lib.collector import collector_paused
from preflight.lib.deadline import abandoned_alive
from preflight.lib.errors import BadInput, Interrupted
from preflight.lib.grouping import ranks_per_host
from preflight.lib.torch_import import import_torch_distributed
from preflight.model import ExitCode, RankFacts, Severity, World
from preflight.model.job_groups import JobGroups
from preflight.model.messages import GoDecision, Verdict
from preflight.options import RunOptions
from preflight.options.agreement import agreed_values, disagreements
from preflight.registry import CROSS, LOCAL, CheckContext, JobView, run_checks, select_checks
from preflight.reports import write_reports
from preflight.reports.targets import refuse_unwritable
from preflight.steps import history, recheck, storage, tcp_reach
from preflight.steps.gather import GatherOptions, gather_facts, gather_failures
from preflight.steps.launchers import node_level, resolve_world
from preflight.steps.phases import Phases, phase_display
from preflight.steps.verdict import RunRecord, build_report, report_alone

# Seconds a non-zero rank waits for rank 0 beyond rank 0's own deadlines (skew); rank 0's
# heartbeat extends the wait while it works (channel/liveness.py).
VERDICT_MARGIN_S = 30.0
NO_LAUNCHER_LINE = ("preflight: no launcher found (no srun, torchrun, mpirun or RANK/WORLD_SIZE variables): "
                    "checking this one process alone; run it under the job's launcher, or `preflight launch -n N`")


def run(options: RunOptions, env: Mapping[str, str] | None = None) -> int:
    """Run preflight as this process's rank; return the exit code every rank shares."""
    world = resolve_world(env)  # 1. world; BadInput propagates to the CLI: one line, exit 2
    if world.launcher == "single" and not options.reports.quiet:
        print(NO_LAUNCHER_LINE, file=sys.stderr, flush=True)  # the run's first line: one process, said at once
    if options.probes.mesh and node_level(world):
        raise BadInput(f"--mesh describes the training's ranks, but {node_level(world)}: run preflight "
                       "under the trainer's torchrun to probe a mesh")
    options = options.for_world(world.world_size)  # the mesh resolved; a bad one for this WORLD_SIZE: exit 2
    if options.run_id:
        world.run_id = options.run_id
    refuse_unwritable(options.reports, options.out_dir, writes_reports=world.rank == 0,
                      files=options.output_files())
    record = RunRecord(world, options)
    code = _steps(record, Exchange(world, options.timeouts.run_s, options.out_dir))
    return _leave(record, code)


def run_in_job(options: RunOptions, world: World, job_store: Any, groups: JobGroups) -> tuple[int, RunRecord]:
    """Steps 2-9 inside a running job (preflight.check, preflight/api.py), on its own store and groups.

    The caller resolved the world (step 1) and the options against it. Nothing here exits
    the process: after a hung probe `record.probes.left_pending` says so and the caller decides.
    Every rank's record carries the verdict's JobReport (`record.report`): rank 0 publishes
    it through the store with the verdict, the other ranks read it.
    """
    refuse_unwritable(options.reports, options.out_dir, writes_reports=world.rank == 0,
                      files=options.output_files())
    record = RunRecord(world, options)
    exchange = Exchange(world, options.timeouts.run_s, options.out_dir, job_store=job_store)
    try:
        code = _steps(record, exchange, groups)
    finally:
        exchange.leave()  # the job's process lives on: this rank's beat must not
    if record.report is None:
        record.report = exchange.read_report()
    return code, record


def _steps(record: RunRecord, exchange: Exchange, groups: JobGroups | None = None) -> int:
    """Steps 2-9 on this rank, rank 0 leading; the exit code every rank shares."""
    world, options = record.world, record.options
    phases = Phases(phase_display(world.rank, options.reports.quiet))
    record.phases = phases.seconds
    ctx = CheckContext(world_size=world.world_size, backend=options.probes.backend,
                       mesh=[(d.name, d.size) for d in options.probes.mesh])
    # Every wait of the run looks as often as the world's size allows (lib/waiting.py): a hand-off
    # already due is seen within ~20 ms in a small job, not up to 0.2 s later.
    with waiting.ceiling_for(world.world_size):
        try:
            # The slow import, after the input is known good (bad input stays a fast exit 2) and before
            # any step's deadline starts; inside the steps, so that an interrupt during it still ends
            # in rank 0's (empty) report. A no-op inside a job (preflight.check): torch is in.
            import_torch_distributed()
            record.started = time.time()  # the run's duration, as before: from here, not the import
            _report_locally(record, phases, exchange, ctx)
            reach = tcp_reach.reachability_for(exchange.store, _own_facts(record), options)
            reach.start()  # this host's listener, before rank 0 waits for anyone
            if world.rank != 0:
                return _follow(record, phases, exchange, reach, groups)
            _lead(record, phases, exchange, reach, ctx, groups)
        except Interrupted as stop:
            record.interrupted = str(stop)
            if world.rank != 0:
                exchange.leave(str(stop))  # rank 0 need not wait for this rank's acknowledgement
                return int(ExitCode.INCOMPLETE)
        return _finish(record, exchange)


def _leave(record: RunRecord, code: int) -> int:
    """The exit code; after a collective that never finished, leave the process at once with it.

    The reports and the verdict are out by now. A process group with a pending collective
    cannot be torn down (gloo's destructor joins the thread still inside it, NCCL's blocks),
    so interpreter exit would hang the job preflight was meant to protect. Likewise after a
    call given up on while inside C++ (a store join's handshake, lib/deadline.abandoned_alive):
    returning during interpreter shutdown, it can abort the process (std::terminate). And after an
    interrupt, which may have left a collective or a store call anywhere: the signal asked to end now.
    """
    if (record.probes is not None and record.probes.left_pending) or record.interrupted or abandoned_alive():
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)
    return code


def _report_locally(record: RunRecord, phases: Phases, exchange: Exchange, ctx: CheckContext) -> None:
    """Steps 2-4 on every rank: gather facts, check them, publish them to rank 0."""
    world, options = record.world, record.options
    with phases.step("facts"):  # 2
        record.facts = gather_facts(world, GatherOptions(options.timeouts.check_s, options.sysfs_root,
                                                         fingerprint=options.fingerprint,
                                                         clock_skew_s=options.clock_skew_s))
    with phases.step("local checks"):  # 3
        found, outcomes = run_checks(select_checks(LOCAL, options.only, options.skip), record.facts, ctx,
                                     options.timeouts.check_s, rank=world.rank, host=world.host)
        record.findings += found
        record.outcomes += outcomes
    with phases.step("exchange"):  # 4
        exchange.open()
        record.nonce = exchange.nonce
        record.authenticated = exchange.secret is not None  # the report's meta says so (PORT005 when not)
        # Secrets get their digests only now, keyed by a random key the ranks share through the
        # store and no report ever holds (see preflight/lib/secrets.py).
        # With a run secret from the launcher the key derives from it, and nobody reads it from the store.
        key = run_auth.digest_key(exchange.secret) if exchange.secret else agree_on_key(exchange.store)
        secrets.seal(record.facts.env, os.environ, key)
        _measure_clock(record, exchange)
        if exchange.store_error:
            store_failed = foreign_store if exchange.foreign else store_did_not_form
            record.findings += store_failed.report(rank=world.rank, host=world.host, reason=exchange.store_error)
        exchange.publish(_own_payload(record))


def _measure_clock(record: RunRecord, exchange: Exchange) -> None:
    """Rank 0 answers clock pings through the exchange; one rank per host measures its offset before
    it publishes (channel/clock.py). Not inside a job's own store (preflight.check)."""
    world = record.world
    if exchange.store is None or exchange.job_store is not None or world.world_size == 1:
        return
    own = record.facts.placement.clock
    if world.rank == 0:  # the reference clock
        exchange.clock_server = clock.serve(world, record.options.timeouts.run_s + VERDICT_MARGIN_S)
        if exchange.clock_server is None:
            own.error = "rank 0 could not open a second store connection to answer clock pings"
        else:
            own.offset_s, own.error_s = 0.0, 0.0
    elif world.local_rank == 0:
        clock.measure(exchange.store, own)


def _lead(record: RunRecord, phases: Phases, exchange: Exchange, reach: tcp_reach.Reachability,
          ctx: CheckContext, groups: JobGroups | None) -> None:
    """Rank 0, steps 4-8: collect every payload, lead reachability, cross-check, decide, probe."""
    options = record.options
    phases.on_step = exchange.lead_heartbeat().stage  # followers wait while rank 0 works (channel/liveness.py)
    with phases.step("collect"):  # 4
        collected = exchange.collect(options.timeouts.run_s)
        exchange.stop_clock()  # every rank that reported measured its clock before it published
        own = _own_payload(record)
        record.all_facts, findings, outcomes = collected.merged_with(own)
        # The gang agrees before it measures: ranks started otherwise never reach a collective (RUN011).
        disagree = [found for name, values in disagreements(collected.agreement(own))
                    for found in options_disagree.report(option=name, values=values)]
        record.findings += findings + gather_failures(record.all_facts) + disagree
        record.outcomes += outcomes
        record.missing = collected.missing(record.world.world_size, record.world.rank)
        if collected.stale_files:
            record.findings += stale_files_ignored.report(folder=str(exchange.out_dir), files=collected.stale_files)
    if disagree:  # no step that needs the same options everywhere: release the ranks waiting for one
        tcp_reach.release(reach, exchange.store)
        storage.release(exchange.store, record.nonce)
    else:
        with phases.step("reachability"):  # 5
            record.reachability = tcp_reach.lead(reach, sorted(ranks_per_host(record.all_facts)))
    # The checkpoint path, before the cross checks: its errors stop the probes.
    if not disagree and storage.enabled(options):
        with phases.step("storage"):
            found = storage.run_lead(exchange.store, {f.rank: f.host for f in record.all_facts}, record.nonce, options)
            record.storage = found.section
            record.findings += found.findings
            record.outcomes += found.outcomes()
    with phases.step("cross checks"):  # 6
        job = JobView(**msgspec.structs.asdict(ctx), ranks=record.all_facts, duplicate_ranks=collected.duplicates,
                      dead_ranks=sorted(collected.dead), reachability=record.reachability,
                      authenticated=record.authenticated)
        with collector_paused():  # see _finish
            found, outcomes = run_checks(select_checks(CROSS, options.only, options.skip), job, ctx,
                                         options.timeouts.check_s, rank=0, host=record.world.host)
        record.findings += found
        record.outcomes += outcomes
    go, reason = _decide_go(record)  # 7
    exchange.announce(keys.GO.key, GoDecision(go, reason))
    if not options.any_probes():
        return
    with phases.step("probes"):  # 8
        if not go:
            record.findings += probes_not_started.report(reason=reason)
            return
        # Imported by a run that probes (~20 modules, ~35 ms of CPU per rank: `skip=["probe"]` pays none).
        from preflight.probes import orchestrate as probes
        from preflight.probes.expectations import judge_profiles
        from preflight.probes.nominal import annotate as annotate_nominal_rates
        from preflight.steps import nccl_account

        outcome = probes.run_probes(record.world, options, exchange.store, groups,
                                    hosts={f.rank: f.host for f in record.all_facts}, alive=exchange.liveness)
        annotate_nominal_rates(outcome.results, record.all_facts, outcome.device_ids, outcome.backend)
        outcome.findings += judge_profiles(outcome.results, record.all_facts, outcome.device_ids, outcome.backend,
                                           options.probes.expect, strict=options.probes.strict_bandwidth)
        record.probes = outcome
        record.outcomes += outcome.device_outcomes
        nccl_findings = nccl_account.judge(outcome, record.all_facts, options.probes.strict_bandwidth)  # NCCL's own
        outcome.findings = mesh_order.leave_to_layout(record.findings, outcome.findings, options.silence)
        record.findings += outcome.findings + nccl_findings + probes.backend_findings(outcome, options.probes.backend,
                                                                                      record.all_facts)


def _follow(record: RunRecord, phases: Phases, exchange: Exchange, reach: tcp_reach.Reachability,
            groups: JobGroups | None) -> int:
    """Any other rank, steps 5-9: take part in reachability and the probes, then adopt rank 0's verdict."""
    world, options = record.world, record.options
    with phases.step("reachability"):  # 5
        tcp_reach.take_part(reach, options.timeouts.run_s)
    if storage.enabled(options) and exchange.has_channel() and options.storage is not None:
        with phases.step("storage"):
            storage.take_part(exchange.store, world.rank, world.host, options.storage, options.timeouts.run_s)
    if not exchange.has_channel():
        # Its finding's id, as every finding carries one (PORT004: the store is another run's).
        check_id = f"{foreign_store.id}: " if exchange.foreign else ""
        print(f"preflight: rank {world.rank}: {check_id}cannot reach rank 0: {exchange.store_error}; "
              f"exit {int(ExitCode.INCOMPLETE)}")
        return int(ExitCode.INCOMPLETE)
    decision = exchange.wait_for(keys.GO.key, options.timeouts.run_s + VERDICT_MARGIN_S)  # 7
    if decision is not None and decision.go and options.any_probes():
        from preflight.probes import orchestrate as probes  # only a run that probes imports them (_lead)

        try:
            record.probes = probes.run_probes(world, options, exchange.store, groups, alive=exchange.liveness)  # 8
        except RuntimeError as exc:  # torch's DistNetworkError / DistStoreError: a store call between collectives
            if not exchange.lost_store(exc):
                raise
    recheck.publish_after(exchange.store, record.facts, options.sysfs_root, options.timeouts.check_s)  # after step 8
    # This rank beats until here (channel/liveness.py): rank 0 waits for every rank that is alive.
    timeouts = options.timeouts
    verdict = exchange.wait_for(keys.VERDICT.key, timeouts.run_s + timeouts.probe_s + VERDICT_MARGIN_S)  # 9
    for line in exchange.refused_lines():  # a foreign client's value under go or verdict: named, never adopted
        print(f"preflight: rank {world.rank}: {store_value_refused.id}: {line}")
    if verdict is None:
        why = exchange.rank_0_gone() or exchange.store_error or "rank 0 stopped answering"
        exchange.leave(f"no verdict within its deadline: {why}")
        code = report_alone(record, exchange.out_dir, why)  # into --out-dir, where there is one
        print(f"preflight: rank {world.rank}: no verdict from rank 0 ({world.master_addr}:{world.master_port}): "
              f"{why}; exit {code}")
        return code
    exchange.acknowledge()
    exchange.leave()
    return verdict.exit_code


def _decide_go(record: RunRecord) -> tuple[bool, str]:
    """Probes never start on a world known to be broken: they would only hang."""
    if record.missing:
        return False, f"{len(record.missing)} rank(s) did not report"
    errors = [f for f in record.findings if f.severity == Severity.ERROR]
    if errors:
        return False, f"{len(errors)} error finding(s), first {errors[0].check_id}"
    return True, "world complete"


def _finish(record: RunRecord, exchange: Exchange) -> int:
    """Rank 0, step 9: build the JobReport, render it everywhere, then publish the exit code."""
    if record.interrupted:
        record.findings += run_interrupted.report(reason=record.interrupted)
    exchange.liveness.stage("verdict")
    if not record.interrupted:  # the RDMA counters' second read, one per host: increases are NIC001
        record.findings += recheck.lead(exchange.store, _own_facts(record), record.all_facts, record.options)
    for key, why in exchange.audit().items():  # a foreign client's value under the owner mark, go or verdict
        record.findings += store_value_refused.report(key=key, reason=why)
    record.findings += history.recall(record)  # this run against its past (docs/history.md)
    # The collector paused while the report is built and written (and the cross checks run): what they
    # allocate is acyclic data, and each automatic full collection would rescan all of it again (a
    # 131,072-rank job on GPU hosts: 12 full collections, none freeing anything, 1.4 of its ~30 CPU-s).
    with collector_paused():
        report = build_report(record)
        remembered, unwritten = history.remember(report, record.options)  # after the verdict; a failure: not written
        # Reports first: once the verdict is out, peers exit, and a launcher such as torchrun's
        # agent stops the remaining workers, rank 0 included. An output not written makes a pass
        # exit 4 (reports/targets.py).
        launch_folder = str(Path(record.options.verdict_file).parent) if record.options.verdict_file else ""
        write_reports(report, record.options.reports, unwritten, also_written=remembered, unannounced=launch_folder)
    if record.options.verdict_file:
        Path(record.options.verdict_file).write_text(f"{report.exit_code}\n")
    record.report = report
    if exchange.job_store is not None:
        exchange.publish_report(report)  # preflight.check: every rank raises with the same report
    exchange.announce(keys.VERDICT.key, Verdict(report.exit_code, report.verdict))
    try:
        # Every rank that is alive (it beats) reads the verdict before the store goes: not a count
        # from rank 0's bookkeeping, which leaves out a rank whose payload was refused (RUN002).
        unread = exchange.wait_for_acknowledgements(interrupted=bool(record.interrupted))
        for rank, why in exchange.liveness.still_running(unread).items():
            # The job's launcher waits for every rank: this one must be stopped with the job.
            print(f"preflight: rank 0: rank {rank} did not read the verdict ({why}); it may still be running",
                  file=sys.stderr)
    except Interrupted:
        pass  # the verdict is out and the reports are written; a launcher stopping us now changes nothing
    exchange.leave()
    return report.exit_code


def _own_facts(record: RunRecord) -> RankFacts:
    """This rank's facts, which step 2 has gathered by the time anything reads them."""
    assert record.facts is not None
    return record.facts


def _own_payload(record: RunRecord) -> RankPayload:
    return RankPayload(record.world.rank, _own_facts(record), list(record.findings), list(record.outcomes),
                       stamp=this_stamp(), options=agreed_values(record.options))
