"""Step 8: collective probes on every DeviceMesh dimension.

`run_probes` is called on every rank once rank 0 gave the go. Every rank builds the process
group and DeviceMesh on the run's store and runs the plan's steps (session.py, steps.py); rank 0
gathers the measurements through the store (collect.py), judges them (judge.py), has the
slow groups localized (localize.py: a pairwise round robin, or group testing among hosts over
sub-communicators), and returns the results and findings. Other ranks return an empty outcome.
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from typing import Any

from preflight.channel import keys
from preflight.channel.board import BadValue, Board
from preflight.channel.liveness import RankLiveness
from preflight.checks.probe_findings import (
    below_expected,
    cross_dim_suspect,
    dim_spans_hosts,
    gpu_job_probed_on_gloo,
    probe_hang,
    probes_could_not_run,
    straggler_group,
    wrong_result,
)
from preflight.checks.probe_memory import collectives_not_on_mig, probe_steps_skipped
from preflight.checks.run_findings import nothing_measured, rank_died, unreadable_payload
from preflight.lib.errors import one_line
from preflight.lib.mesh_shape import WORLD_DIM, dim_groups
from preflight.lib.nccl_summary import summarize
from preflight.model import Finding, ProbeResult, RankFacts, World
from preflight.model.messages import RemeasureSteps, Status
from preflight.model.nccl_account import NcclAccount
from preflight.model.probe_faults import Hang
from preflight.model.probe_outcome import ProbeOutcome
from preflight.options import RunOptions
from preflight.probes import liveness, localize, nccl_capture, setup
from preflight.probes.device import run as device_probes


def run_probes(world: World, options: RunOptions, store: Any, job: Any = None,
               hosts: Mapping[int, str] | None = None, *, alive: RankLiveness) -> ProbeOutcome:
    """Measure the collectives on every rank; rank 0 returns results and findings.

    job: the job's own groups (session.JobGroups, from preflight.check), probed as they are;
    None: preflight makes its process group and DeviceMesh on the run's store and destroys them.
    hosts: rank -> host as rank 0 knows them, to name the host of a rank that dies before it
    sent any probe result. alive: the run's liveness owner (the exchange's), whose beat goes on
    after the probes and whose watch names the dead.
    """

    from preflight.probes import session as ses
    from preflight.probes.plan import build_plan

    timeout_s = options.timeouts.probe_s
    if store is None:
        return _could_not_run(world, "the c10d store did not form, so no process group can")
    stores = liveness.probe_stores(store)
    if stores is None:
        return _could_not_run(world, "no second connection to the run's store could be made for the probes' "
                                     "process group (torch's set-up must not block the run's own client)")
    # A rank that dies is named, not waited for (beats on the run's client, not the probes').
    with liveness.watching(world, alive) as watch:
        try:
            if job is not None:
                choice = ses.BackendChoice(job.backend, "the job's own process groups")
                plan = build_plan(options, job.device)
            else:
                choice = liveness.bounded(lambda: ses.decide_backend(options.probes.backend, world, stores.torch,
                                                                     timeout_s),
                                          timeout_s + 10, watch)
                plan = build_plan(options, "cuda" if choice.backend == "nccl" else "cpu")
        except Exception as exc:  # no NCCL, no GPU, a rank that died: nothing to measure
            return _gave_up(world, exc, watch, hosts)
        # NCCL's own account: its debug log set up before the first communicator (nccl_capture.py)
        capture = _capture_for(job, choice.backend)
        try:
            return _probe(world, options, stores, job, hosts, choice, plan, capture, watch)
        finally:
            if job is None and capture is not None:
                nccl_capture.close(capture)


def _capture_for(job: Any, backend: str) -> nccl_capture.NcclCapture | None:
    """NCCL's log of this run's communicators: set up here (preflight's own), or the trainer's file."""
    if backend != "nccl":
        return None
    return nccl_capture.existing() if job is not None else nccl_capture.start()


def _probe(world: World, options: RunOptions, stores: Any, job: Any, hosts: Mapping[int, str] | None,
           choice: Any, plan: Any, capture: nccl_capture.NcclCapture | None, watch: Any) -> ProbeOutcome:
    """run_probes once the backend is chosen: open the session, measure, publish, judge (rank 0).

    stores: liveness.probe_stores' pair: `board` (this thread's client, calls that return at once) and
    `torch` (the client torch's group set-up blocks in, used only by the set-up thread).
    """
    from preflight.probes import session as ses
    from preflight.probes import steps

    timeout_s = options.timeouts.probe_s
    mark = setup.marker(Board(stores.board), world.rank, world.host)  # this thread's, on its client
    mark("started")
    setup_began = time.monotonic()
    deadline_s = timeout_s + setup.SETUP_GRACE_S + 5  # beyond the process-group timeout (timeout_s + 5)
    # The set-up thread marks its stages on torch's client, the one it blocks on: never on this thread's.
    mark_setup = setup.marker(Board(stores.torch), world.rank, world.host)
    try:
        session = liveness.bounded(
            (lambda: ses.adopt_session(world, plan, stores.torch, job, timeout_s)) if job is not None else
            (lambda: ses.open_session(world, plan, stores.torch, choice.backend, timeout_s, mark=mark_setup)),
            deadline_s, watch)
    except setup.SetupTimeout as exc:  # a rank died, or stuck in ncclCommInitRank / a GPU's context creation
        if watch.dead():
            return _gave_up(world, exc, watch, hosts)
        return _setup_hung(world, stores.board, choice, deadline_s, time.monotonic() - setup_began, watch)
    except Exception as exc:  # a rank that never joined, a mesh the world cannot hold
        if watch.dead():
            return _gave_up(world, exc, watch, hosts)
        if time.monotonic() - setup_began >= timeout_s:  # the process-group timeout: it waited for someone
            return _setup_hung(world, stores.board, choice, timeout_s + 5, time.monotonic() - setup_began, watch,
                               reason=f"{type(exc).__name__}: {one_line(exc)}")
        return _could_not_run(world, f"{type(exc).__name__}: {one_line(exc)}")
    # From here the steps run in this thread: the probes' keys on its client (torch keeps its own).
    session.store = stores.board
    mark("done")
    # The session opened in a helper thread; this thread runs the steps: the bound GPU is its current
    # device too (CUDA's is per thread), so NCCL's streams and the timing events are that GPU's.
    try:
        session.enter_device()
    except Exception as exc:  # the GPU bound a moment ago failed (fell off the bus, reset): a finding
        outcome = _could_not_run(world, f"device {session.device}: {type(exc).__name__}: {one_line(exc)}")
        outcome.backend, outcome.backend_reason, outcome.left_pending = choice.backend, choice.reason, True
        return outcome
    # --- device probes (probes/device/run.py): every rank's own device, before the collectives ---
    if options.device_probes_enabled():
        device_probes.measure(session, options, watch)
    # --- end device probes ---
    records, status = steps.run_steps(session) if options.probes_enabled() else ([], Status())
    stopped_at = time.monotonic()
    account, missing = nccl_capture.read(capture, world.host) if capture is not None else (None, "")
    if capture is not None and job is None:
        nccl_capture.relay(capture)  # what the job's own NCCL_DEBUG would have printed
    steps.publish(session.board, world.rank, world.host, records, status, account, missing)
    if world.rank == 0:
        outcome = _judge_on_rank_zero(session, status, options, stopped_at, watch)
        if options.device_probes_enabled():  # after the collectives: every device report is in by now
            outcome.device_rows, device_findings = device_probes.lead(session, options, watch,
                                                                      hosts=dict(outcome_hosts(outcome)))
            outcome.findings += device_findings
            outcome.device_outcomes = device_probes.outcomes(device_findings)
    else:
        outcome = ProbeOutcome()
        localize.follow(session, status)
    outcome.backend, outcome.backend_reason = choice.backend, choice.reason
    outcome.left_pending = status.state != "done" or outcome_has_hang(outcome) or session.abandoned
    _teardown(session, clean=not outcome.left_pending)
    return outcome


def backend_findings(outcome: ProbeOutcome, requested: str, facts: Sequence[RankFacts]) -> list[Finding]:
    """A GPU job that `--backend auto` probed on gloo is a warning saying why (BW010)."""
    gpu_hosts = sorted({f.host for f in facts if f.gpus})
    if requested != "auto" or outcome.backend != "gloo" or not gpu_hosts:
        return []
    return gpu_job_probed_on_gloo.report(reason=outcome.backend_reason or "no reason recorded", gpu_hosts=gpu_hosts)


def outcome_hosts(outcome: ProbeOutcome) -> dict[int, str]:
    """Rank -> host of every rank whose session opened (to name a rank whose device report never came)."""
    return {d.rank: d.host for d in outcome.devices}


def outcome_has_hang(outcome: ProbeOutcome) -> bool:
    """True when the probes ended on a hang (the communicators must not be torn down cleanly)."""
    return any(f.check_id == probe_hang.id for f in outcome.findings)


def _wrong_by_group(results: list[ProbeResult]) -> list[list[ProbeResult]]:
    """Unverified results, one list per (dim, op, group) across sizes: one finding per group, not per size."""
    grouped: dict[tuple[str, str, int], list[ProbeResult]] = {}
    for result in results:
        if not result.verified:
            grouped.setdefault(result.group_key, []).append(result)
    return list(grouped.values())


def _judge_on_rank_zero(session: Any, status: Any, options: RunOptions, stopped_at: float,
                        watch: RankLiveness) -> ProbeOutcome:
    from preflight.probes import collect, confirm, judge

    world, plan = session.world, session.plan
    got = collect.gather(session.board, world.world_size, session.timeout_s, early=status.state != "done",
                         dead=watch.dead)
    session.bad_values.update({r: bad for r, bad in got.bad.items() if r not in session.bad_values})
    # A living rank with no results by the deadline is stuck inside the probes (its beat runs on
    # in its own thread): the report names it, and the verdict's hand-off does not wait for it.
    watch.hung({r: "sent no probe results by the deadline" for r in range(1, world.world_size)
                if r not in got.payloads and r not in got.bad and r not in got.dead})
    hosts = got.hosts()
    mesh_dims = [d for d in plan.dims if d.name != WORLD_DIM]
    groups = {**dim_groups(mesh_dims), WORLD_DIM: [list(range(world.world_size))]}
    outcome = ProbeOutcome(results=collect.results(got, hosts), devices=got.devices(), device_ids=got.device_ids())
    _take_nccl_accounts(outcome, session.board, got, groups)
    if options.probes_enabled():  # asked for and not measured is never a pass
        for reason in plan.nothing_to_measure(world.world_size):
            outcome.findings += nothing_measured.report(reason=reason, what="probes")
    hang = collect.diagnose_hang(got, plan.steps(), groups, world.world_size)
    if hang is not None and hang.could_not_run:  # a step raised (an op this torch lacks): not the ranks' fault
        culprits = sorted(hang.culprits)
        outcome.findings += probes_could_not_run.report(
            reason=f"{hang.op} on {hang.dim}: {hang.reason}", ranks=culprits,
            hosts=sorted({hosts[r] for r in culprits if hosts.get(r)}))
    elif hang is not None:
        outcome.findings += probe_hang.report(
            hang, hosts=hosts, timeout_s=session.timeout_s,
            # rank 0's own time from the start of the step it stopped in to this finding
            reported_after_s=status.elapsed_s + time.monotonic() - stopped_at)
    outcome.findings += probe_steps_skipped.report(skipped=session.skipped)  # too big for the free memory
    outcome.findings += collectives_not_on_mig.report(found=session.on_mig)  # NCCL not attempted on MIG (mig.py)
    for wrong in _wrong_by_group(outcome.results):
        outcome.findings += wrong_result.report(wrong)
    outcome.findings += _spans_hosts(mesh_dims, groups, hosts)
    slow: list[Any] = []
    if hang is None:
        # Candidates, then only those a second measurement finds again (confirm.py).
        slow = confirm.lead_groups(session, judge.stragglers(outcome.results, options.probes.straggler_ratio),
                                   options.probes.straggler_ratio)
        for s in slow:
            outcome.findings += straggler_group.report(s, ratio=options.probes.straggler_ratio)
        for rank, dims in judge.cross_dim_suspects(slow).items():
            outcome.findings += cross_dim_suspect.report(rank=rank, host=hosts.get(rank, ""), dims=dims,
                                                         slow_groups=[s for s in slow if rank in s.ranks])
        for b in judge.below_expected(outcome.results, plan.expect):
            outcome.findings += below_expected.report(b.result, expected_gbps=b.expected_gbps)
    else:
        session.board.put(confirm.AGAIN, RemeasureSteps([]))
    outcome.findings += localize.lead(session, slow, outcome.results, hosts, options)
    watch.hung(session.stuck_with)  # still inside the exchange rank 0 gave up on: it will not read the verdict
    # A value under a probe key that did not decode: a finding naming the rank it came from.
    for rank, bad in sorted(session.bad_values.items()):
        outcome.findings += unreadable_payload.report(rank=rank, reason=bad.line())
    return outcome


def _take_nccl_accounts(outcome: ProbeOutcome, board: Board, got: Any, groups: dict[str, list[list[int]]]) -> None:
    """Every rank's NCCL account, the ranks without one (and why), and the report's summary."""
    outcome.nccl_missing = {r: p.nccl_missing for r, p in got.payloads.items() if p.nccl_missing}
    ranks = sorted(r for r in got.payloads if r not in outcome.nccl_missing)
    hosts = got.hosts()
    values = board.fetch_interned(keys.NCCL_ACCOUNT, ranks)
    for rank, value in zip(ranks, values, strict=True):
        if isinstance(value, BadValue):
            outcome.nccl_missing[rank] = f"its NCCL account did not decode: {value.line()}"
    # ranks whose NCCL said the same share one account object (fetch_interned): read-only from here on
    outcome.nccl_accounts = {r: v for r, v in zip(ranks, values, strict=True) if isinstance(v, NcclAccount)}
    outcome.nccl_hosts = hosts
    if outcome.nccl_accounts or outcome.nccl_missing:
        outcome.nccl = summarize(outcome.nccl_accounts, len(outcome.nccl_missing), groups, hosts)


def _spans_hosts(mesh_dims: list[Any], groups: dict[str, list[list[int]]], hosts: dict[int, str]) -> list[Finding]:
    from preflight.probes import judge

    name = judge.intra_host_dim([d.name for d in mesh_dims])
    if name is None:
        return []
    spanning = judge.spanning_groups(groups[name], hosts)
    if not spanning:
        return []
    _, ranks, names = spanning[0]
    return dim_spans_hosts.report(dim=name, groups=len(spanning), total=len(groups[name]),
                                  example_ranks=ranks, example_hosts=names)


def _setup_hung(world: World, store: Any, choice: Any, deadline_s: float, elapsed_s: float, watch: RankLiveness,
                reason: str = "") -> ProbeOutcome:
    """Setup overran its deadline, or timed out waiting inside torch (reason): rank 0 names the ranks
    furthest behind (BW002), which the verdict's hand-off then does not wait for; nobody tears
    anything down."""
    outcome = ProbeOutcome(backend=choice.backend, backend_reason=choice.reason, left_pending=True)
    if world.rank != 0:
        return outcome
    stages, hosts = setup.read_stages(Board(store), world.world_size)
    found = setup.blame(stages, world.world_size)
    watch.hung(found.culprits)
    if found.common_stage:
        reason = "; ".join(filter(None, [f"every rank is inside setup stage '{found.common_stage}': "
                                         "they could not connect to each other", reason]))
    hang = Hang(dim=WORLD_DIM, op="setup", size_bytes=0, group_index=-1, ranks=list(range(world.world_size)),
                step=-1, waiting=found.waiting, culprits=found.culprits, phase="setup", elapsed_s=elapsed_s,
                failed=bool(reason) and not found.common_stage, reason=reason)
    outcome.findings += probe_hang.report(hang, hosts=hosts, timeout_s=deadline_s, reported_after_s=elapsed_s)
    return outcome


def _gave_up(world: World, exc: BaseException, watch: RankLiveness,
             hosts: Mapping[int, str] | None) -> ProbeOutcome:
    """The probes could not start: RUN008 for each rank known dead, else could-not-run (BW009)."""
    outcome = _could_not_run(world, f"{type(exc).__name__}: {one_line(exc)}", watch.dead(), hosts)
    outcome.left_pending = isinstance(exc, setup.SetupTimeout)  # its thread is inside the group's set-up
    return outcome


def _could_not_run(world: World, reason: str, dead: Mapping[int, str] | None = None,
                   hosts: Mapping[int, str] | None = None) -> ProbeOutcome:
    if world.rank != 0:
        return ProbeOutcome()
    if dead:  # the probes could not start because a rank died: that rank is the finding
        findings = []
        for rank, why in sorted(dead.items()):
            host = (hosts or {}).get(rank, "")
            findings += rank_died.report(rank=rank, host=host, how=why, when="while the probes were starting")
        return ProbeOutcome(findings=findings)
    return ProbeOutcome(findings=probes_could_not_run.report(reason=reason))


def _torch_cuda() -> Any:
    """torch.cuda (imported only where a GPU is in use)."""
    import torch

    return torch.cuda


def _teardown(session: Any, clean: bool) -> None:
    """Destroy what preflight made after a clean run; after a hang leave it (destroy would block).

    On the job's own groups (preflight.check) only the groups made here go; the job's stay.
    """
    import torch.distributed as dist

    if not clean or not dist.is_initialized():
        return
    if session.kind == "cuda":  # the probes' buffers are gone: their cached blocks go back to the device
        (session.cuda or _torch_cuda()).empty_cache()
    if session.owner == "job":
        for group in session.owned:
            dist.destroy_process_group(group)
        return
    dist.destroy_process_group()
