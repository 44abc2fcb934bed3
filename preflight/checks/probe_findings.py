"""Collective probes: wrong data, hangs, slow groups, missed expectations (slow hosts and links:
localization_findings.py).

Engine-scope checks: the probes (preflight/probes/) measure and judge; these turn what they
found into findings with one id, one severity and one hint each. What other code reads back
from a finding's `data` it reads through the typed readers at the end of this module, next
to the code that writes it (the spare-node choice, steps/host_choice.py).
"""

from __future__ import annotations

from collections.abc import Iterable

from msgspec import Struct

from preflight.lib.hostlist import rank_list, ranks_text
from preflight.lib.numbers import json_number
from preflight.lib.units import human_bytes, percent
from preflight.model import Finding, ProbeResult, Severity
from preflight.model.probe_faults import Hang, Straggler
from preflight.registry import Grade, Problem, Tags, engine_check


@engine_check(
    "BW001",
    tag=Tags.PROBE,
    severity=Severity.ERROR,
    hint="Wrong data is never a slow link: drain the named ranks' hosts and run GPU memory and "
    "NIC diagnostics (dcgmi diag -r 3, ibv_rc_pingpong) before any training on them.",
    blames_host=True,
)
def wrong_result(results: list[ProbeResult]) -> Iterable[Problem]:
    """A collective returned a wrong value.

    Every probe uses rank-dependent inputs with one known result. A wrong element is
    attributed to the rank whose data it carried (its source in all_to_all, all_gather,
    broadcast and send/recv; its owner in all_reduce and reduce_scatter, where each element
    is nonzero on exactly one rank), and the ranks that received wrong values are listed.
    """
    first = results[0]  # one group's unverified results, one per size
    sizes = sorted(r.size_bytes for r in results)
    wrong_ranks = sorted({x for r in results for x in r.wrong_ranks})
    bad_sources = sorted({x for r in results for x in r.bad_sources})
    culprits = bad_sources or wrong_ranks
    yield Problem(
        f"{first.op} on {first.dim} group {first.group_index} (ranks {rank_list(first.ranks)}) returned wrong data at "
        f"{', '.join(human_bytes(size) for size in sizes)}: "
        f"data from rank(s) {rank_list(bad_sources) or '?'} arrived wrong on rank(s) {rank_list(wrong_ranks)}",
        ranks=culprits, hosts=[h for r, h in zip(first.ranks, first.hosts) if r in culprits],
        data={"dim": first.dim, "op": first.op, "sizes": sizes, "group_index": first.group_index,
              "wrong_ranks": wrong_ranks, "bad_sources": bad_sources},
    )


@engine_check(
    "BW002",
    tag=Tags.PROBE,
    severity=Severity.ERROR,
    hint="The named ranks were not in the collective with their group: look at their logs and "
    "hosts (a crashed or hung process, a desynchronised code path, a dead link); the waiting "
    "ranks are victims.",
    blames_host=True,
)
def probe_hang(hang: Hang, hosts: dict[int, str], timeout_s: float, reported_after_s: float = 0.0) -> Iterable[Problem]:
    """A collective did not finish within --probe-timeout (or failed), and who caused it.

    Communicator setup (the process group, the DeviceMesh, NCCL's ncclCommInitRank) has a
    deadline too: the probe timeout plus 15 s. The ranks furthest behind in setup are named.
    Sometimes every rank is inside the same setup stage: then nobody is singled out, since
    NCCL's bootstrap could not connect the ranks. Check NCCL_SOCKET_IFNAME and the firewall
    between the hosts.

    Each op has a deadline. When it expires the rank stops probing and records, in the c10d
    store (never through the stuck communicator), where it stopped; rank 0 compares every
    rank's position and names the ranks that were not in the step with their group: ranks
    that moved past it (skipped the op or returned early) and ranks that never reached it.
    A rank that reached a step that only creates its group's communicators and sent nothing is
    named as stuck creating them: NCCL's creation holds the calling thread, so such a rank
    cannot say where it is until the call returns.
    """
    group = f"{hang.dim} group {hang.group_index}" if hang.group_index >= 0 else "the control barrier"
    what = f"{hang.op} on {group} at {human_bytes(hang.size_bytes)}" if hang.op else "the probes"
    if hang.phase == "setup":  # process group / DeviceMesh / NCCL communicator creation (probes/setup.py)
        what = "communicator setup (process group, DeviceMesh, NCCL communicators)"
    how = "failed" if hang.failed else f"did not finish within {timeout_s:g}s"
    culprits, waiting = hang.culprits, hang.waiting
    named = "; ".join(f"rank {r}: {why}" for r, why in sorted(culprits.items()))
    yield Problem(
        f"{what} {how}: {named}" + (f" (waiting: {ranks_text(waiting)})" if waiting else "")
        + (f" [{hang.reason}]" if (hang.failed or hang.phase == "setup") and hang.reason else ""),
        ranks=sorted(culprits), hosts=[hosts.get(r, "") for r in sorted(culprits) if hosts.get(r)],
        data={"dim": hang.dim, "op": hang.op, "size_bytes": hang.size_bytes, "group_index": hang.group_index,
              "culprits": {str(k): v for k, v in culprits.items()}, "waiting": waiting,
              "detected_after_s": round(hang.elapsed_s, 3), "reported_after_s": round(reported_after_s, 3)},
    )


# A straggler confirmed twice below this fraction of its siblings is an error, not a warning. Every
# step of a synchronous job waits for its slowest group, so a group at under half its siblings' speed
# at least doubles the time of every collective over that dimension: the job runs at its pace, not at
# the cluster's. Above it (between 50% and --straggler-ratio) the loss is real but bounded, and a
# warning leaves the decision to the user. Measured twice with every iteration separated, it is not noise.
SEVERE_FRACTION = 0.5


def severe_straggler(s: Straggler) -> bool:
    """Confirmed by the second pass, and below SEVERE_FRACTION of its siblings in both passes."""
    if s.confirm_busbw_gbps is None or not s.confirm_siblings_median_gbps or not s.siblings_median_gbps:
        return False
    return (s.busbw_gbps / s.siblings_median_gbps < SEVERE_FRACTION
            and s.confirm_busbw_gbps / s.confirm_siblings_median_gbps < SEVERE_FRACTION)


@engine_check(
    "BW003",
    tag=Tags.PROBE,
    severity=Severity.WARN,
    grades=(Grade(Severity.ERROR, "confirmed twice below 50% of its siblings' median"),),
    context_only=True,
    hint="Compare the named group's hosts with its siblings': a degraded link (PCIe/NVLink width, "
    "IB port speed), a busy or throttled GPU, or a wrong NIC; see the localization findings.",
)
def straggler_group(straggler: Straggler, ratio: float) -> Iterable[Problem]:
    """A group of a mesh dimension is well below its siblings, beyond what noise explains, twice.

    All groups of a dimension run the same collective at once, so they should reach the same
    bus bandwidth. At the largest size, a group is a straggler when (1) its median busbw is
    below --straggler-ratio times the median of its siblings, and (2) the spread of the
    iterations does not explain the gap: every timed iteration of the group is slower than
    every iteration of its healthy siblings, and the chance of such a complete separation
    from noise alone, 1 / C(n+m, n) for n iterations of the group against m of its siblings
    if all came from one distribution, is at most 1% (1/252 for 5 iterations against one
    sibling, 1/15504 against three). Scheduler noise is not independent from one iteration to
    the next, so this is only a candidate: the step is measured again on every group (the
    siblings are the known-good partners) with four times the calls, each figure the mean of four
    (probes/confirm.py: on shared CPU cores five calls fit in a few scheduler slices, and one
    stalled call no longer decides), and the group is reported only if it separates again; the
    finding's data has both passes. With independent passes the false-alarm rate per group is
    the product of the two chances (under 1e-4 with 5 iterations); on a shared 2-core CPU, 10
    healthy runs name no straggler.

    Severity: a group confirmed twice below 50% of its siblings' median (both passes) is an
    ERROR, exit 3: every collective over that dimension waits for it, so the job would run at
    under half speed. Between 50% and --straggler-ratio it is a WARNING (exit 0, 1 with
    --strict): a real but bounded loss, the user decides. The group's hosts are where the
    slowness showed, not all its cause: they go on no exclude list (BW004, BW005, BW006 and BW012
    name the culprit; spare-node choice ranks the group's hosts by this finding's figures).
    """
    s = straggler
    severe = severe_straggler(s)
    again = ""
    if s.confirm_busbw_gbps is not None and s.confirm_siblings_median_gbps:
        share = percent(s.confirm_busbw_gbps / s.confirm_siblings_median_gbps)
        again = (f"; measured again over {s.confirm_calls} calls: {s.confirm_busbw_gbps:.3g} GB/s, {share} "
                 f"of {s.confirm_siblings_median_gbps:.3g}")
    yield Problem(
        f"{s.op} on {s.dim} group {s.group_index} (ranks {rank_list(s.ranks)}) at {human_bytes(s.size_bytes)}: busbw "
        f"{s.busbw_gbps:.3g} GB/s is {percent(s.busbw_gbps / s.siblings_median_gbps)} of its siblings' median "
        f"{s.siblings_median_gbps:.3g} GB/s (threshold {percent(ratio)}; its fastest iteration {s.best_iter_gbps:.3g} "
        f"< their slowest {s.siblings_worst_iter_gbps:.3g}){again}"
        + (f"; below {percent(SEVERE_FRACTION)} twice: an error" if severe else ""),
        ranks=s.ranks, hosts=s.hosts, severity=Severity.ERROR if severe else None,
        data={"dim": s.dim, "op": s.op, "group_index": s.group_index, "busbw_gbps": s.busbw_gbps,
              "siblings_median_gbps": s.siblings_median_gbps, "best_iter_gbps": s.best_iter_gbps,
              "siblings_worst_iter_gbps": s.siblings_worst_iter_gbps, "false_alarm_p": s.false_alarm_p,
              "confirm_busbw_gbps": s.confirm_busbw_gbps,
              "confirm_siblings_median_gbps": s.confirm_siblings_median_gbps, "confirm_calls": s.confirm_calls},
    )


@engine_check(
    "BW004",
    tag=Tags.PROBE,
    severity=Severity.WARN,
    grades=(Grade(Severity.ERROR, "one of its slow groups is confirmed twice below 50% of its siblings' median"),),
    hint="The rank sits in slow groups of several dimensions: suspect its GPU, its host or its NIC.",
)
def cross_dim_suspect(rank: int, host: str, dims: list[str], slow_groups: list[Straggler]) -> Iterable[Problem]:
    """A rank is in slow groups of two or more mesh dimensions, so it is the likely cause.

    Severity as BW003's: an ERROR when one of its slow groups is (confirmed twice below 50% of
    its siblings), a WARNING otherwise. The finding names the rank, so the verdict line does.
    """
    severe = [s for s in slow_groups if severe_straggler(s)]
    worst = min((s.busbw_gbps / s.siblings_median_gbps for s in slow_groups if s.siblings_median_gbps), default=1.0)
    yield Problem(f"in slow groups of dimensions {', '.join(dims)}, down to {percent(worst)} of "
                  f"their siblings" + (f" (below {percent(SEVERE_FRACTION)} twice)" if severe else ""),
                  ranks=[rank], hosts=[host] if host else [], data={"dims": dims, "worst_fraction": round(worst, 4)},
                  severity=Severity.ERROR if severe else None)


@engine_check(
    "BW007",
    tag=Tags.PROBE,
    severity=Severity.ERROR,
    hint="The dimension is below 0.9x what --expect (or, with --strict-bandwidth, its hardware profile) "
    "says its links deliver: check the links (NVLink/IB rate and width), NCCL's transport choice "
    "(NCCL_DEBUG=INFO) and the topology.",
)
def below_expected(result: ProbeResult, expected_gbps: float, source: str = "--expect") -> Iterable[Problem]:
    """A group's bus bandwidth is below 0.9 x the figure --expect gives for its dimension.

    Also a group below its hardware profile (BW011) when --strict-bandwidth makes that an error.
    """
    yield _short_of(result, expected_gbps, source, f"the expected {expected_gbps:.3g} GB/s")


def _short_of(r: ProbeResult, expected_gbps: float, source: str, expectation: str) -> Problem:
    """A group below what it should reach (BW007: --expect; BW011: its hardware profile), as both say it."""
    return Problem(f"{r.op} on {r.dim} group {r.group_index} (ranks {rank_list(r.ranks)}) "
                   f"at {human_bytes(r.size_bytes)}: "
                   f"busbw {r.busbw_gbps:.3g} GB/s is {percent(r.busbw_gbps / expected_gbps)} of {expectation} "
                   f"({source})",
                   ranks=r.ranks, hosts=r.hosts,
                   data={"dim": r.dim, "op": r.op, "busbw_gbps": r.busbw_gbps, "expected_busbw_gbps": expected_gbps,
                         "expected_source": source})


@engine_check(
    "BW008",
    tag=Tags.PROBE,
    severity=Severity.WARN,
    hint="Put the innermost mesh dimension (tp) inside one host: reorder --mesh or the launcher's "
    "rank placement so each tp group shares NVLink instead of the network.",
)
def dim_spans_hosts(dim: str, groups: int, total: int, example_ranks: list[int],
                    example_hosts: list[str]) -> Iterable[Problem]:
    """A tp group (or the innermost dimension's) spans hosts: it will run over the network, not NVLink.

    Where another --mesh order keeps the dimension inside one host or NVLink domain, LAYOUT006
    says so before the probes, with that order, and this finding is not repeated (runner.py,
    checks/mesh_order.leave_to_layout); it remains where no order helps (tp8 on 4-GPU hosts).
    """
    yield Problem(f"{groups} of {total} {dim} group(s) span hosts, e.g. ranks {rank_list(example_ranks)} on "
                  f"{', '.join(example_hosts)}", ranks=example_ranks, hosts=example_hosts,
                  data={"dim": dim, "groups": groups})


@engine_check(
    "BW009",
    tag=Tags.PROBE,
    severity=Severity.COULD_NOT_RUN,
    hint="The process group or DeviceMesh could not be built: check --backend (nccl needs a GPU "
    "per rank) and the error; the collectives are unverified.",
)
def probes_could_not_run(reason: str, ranks: list[int] | None = None,
                         hosts: list[str] | None = None) -> Iterable[Problem]:
    """The probes could not start: process group, DeviceMesh or backend failed.

    Without a process group nothing about the collectives is known: not their speed, not
    whether they return correct data, not whether they hang. The usual causes are
    `--backend nccl` on a rank without a GPU or on a torch built without NCCL, a mesh the
    world cannot hold, or a rank that left before the process group formed.
    """
    named = f" on rank(s) {rank_list(ranks)}" if ranks else ""
    yield Problem(f"probes could not run{named}: {reason}", ranks=ranks or [], hosts=hosts or [])


@engine_check(
    "BW010",
    tag=Tags.PROBE,
    severity=Severity.WARN,
    hint="Give every rank exactly one visible GPU (srun --gpus-per-task=1) or as many as it has local "
    "ranks, or pass --backend nccl to make a rank that cannot bind one an error.",
)
def gpu_job_probed_on_gloo(reason: str, gpu_hosts: list[str]) -> Iterable[Problem]:
    """The hosts have GPUs, but `--backend auto` measured the collectives on gloo (CPU, TCP).

    auto chooses NCCL only when every rank can bind a GPU (one visible device, or at least as
    many as the host's local ranks). When one cannot, the whole job is probed on gloo: the
    figures say nothing about NVLink or InfiniBand, and the training, which will use NCCL, is
    not what was verified. The reason names the rank that could not bind a GPU and why.
    """
    yield Problem(f"probes ran on gloo, not NCCL, though {len(gpu_hosts)} host(s) have GPUs: {reason}",
                  hosts=gpu_hosts, data={"reason": reason})


@engine_check(
    "BW011",
    tag=Tags.PROBE,
    severity=Severity.WARN,
    grades=(Grade(Severity.ERROR, "--strict-bandwidth is given", as_check="BW007"),),
    hint="The group is below what its hardware delivers when healthy (docs/expectations.md): check "
    "NVLink state and width (nvidia-smi nvlink --status), the IB port rate (ibstat), NCCL's "
    "transport choice (NCCL_DEBUG=INFO); --strict-bandwidth makes this an error.",
)
def below_profile(result: ProbeResult, expected_gbps: float, source: str) -> Iterable[Problem]:
    """A group's busbw is below 0.9 x its hardware profile, with no --expect for its dimension.

    When --expect is absent, each group on NCCL is judged against a shipped profile chosen
    from the facts: inside a host by GPU model, NVLink generation and link count; across
    hosts by the InfiniBand rate of the ports NCCL uses (table and sources in
    docs/expectations.md). Siblings that are all equally slow (a whole node at half NVLink
    speed) pass the straggler rule but not this one. On gloo no profile applies.
    """
    yield _short_of(result, expected_gbps, source, f"the {expected_gbps:.3g} GB/s its hardware should reach")


# -- Readers of these findings' data (steps/host_choice.py): the keys are written above and read
# only here, so a renamed key fails tests/checks/test_evidence_readers.py, not the spare-node choice.
# (BW005, BW006 and BW012's: checks/localization_findings.py.)

class StragglerFigures(Struct, frozen=True):
    """BW003 as the spare-node choice reads it: which group, and its busbw as a fraction of its
    siblings' median (the confirming pass's where there is one; None when neither is in the data)."""

    dim: str
    group_index: int | None
    fraction: float | None


def straggler_figures(finding: Finding) -> StragglerFigures:
    """BW003's group and figure from its data."""
    data = finding.data
    mine = json_number(data.get("confirm_busbw_gbps")) or json_number(data.get("busbw_gbps"))
    theirs = json_number(data.get("confirm_siblings_median_gbps")) or json_number(data.get("siblings_median_gbps"))
    index = json_number(data.get("group_index"))
    return StragglerFigures(dim=str(data.get("dim", "?"))[:64], group_index=None if index is None else int(index),
                            fraction=mine / theirs if mine is not None and theirs else None)
