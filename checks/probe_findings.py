"""Collective probes: wrong data, hangs, slow groups, slow hosts and links, missed expectations.

Engine-scope checks: the probes (preflight/probes/) measure and judge; these turn what they
found into findings with one id, one severity and one hint each.
"""

from __future__ import annotations

from collections.abc import Iterable

from preflight.lib.units import human_bytes
from preflight.model import ProbeResult, Severity
from preflight.model.probe_faults import Hang, Straggler
from preflight.registry import Problem, Tags, engine_check


def _ranks(ranks: Iterable[int]) -> str:
    return ",".join(str(r) for r in ranks)


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
        f"{first.op} on {first.dim} group {first.group_index} (ranks {_ranks(first.ranks)}) returned wrong data at "
        f"{', '.join(human_bytes(size) for size in sizes)}: "
        f"data from rank(s) {_ranks(bad_sources) or '?'} arrived wrong on rank(s) {_ranks(wrong_ranks)}",
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
    """
    group = f"{hang.dim} group {hang.group_index}" if hang.group_index >= 0 else "the control barrier"
    what = f"{hang.op} on {group} at {human_bytes(hang.size_bytes)}" if hang.op else "the probes"
    if hang.phase == "setup":  # process group / DeviceMesh / NCCL communicator creation (probes/setup.py)
        what = "communicator setup (process group, DeviceMesh, NCCL communicators)"
    how = "failed" if hang.failed else f"did not finish within {timeout_s:g}s"
    culprits, waiting = hang.culprits, hang.waiting
    named = "; ".join(f"rank {r}: {why}" for r, why in sorted(culprits.items()))
    yield Problem(
        f"{what} {how}: {named}" + (f" (waiting: ranks {_ranks(waiting)})" if waiting else "")
        + (f" [{hang.reason}]" if (hang.failed or hang.phase == "setup") and hang.reason else ""),
        ranks=sorted(culprits), hosts=[hosts.get(r, "") for r in sorted(culprits) if hosts.get(r)],
        data={"dim": hang.dim, "op": hang.op, "size_bytes": hang.size_bytes, "group_index": hang.group_index,
              "culprits": {str(k): v for k, v in culprits.items()}, "waiting": waiting,
              "detected_after_s": round(hang.elapsed_s, 3), "reported_after_s": round(reported_after_s, 3)},
    )


@engine_check(
    "BW003",
    tag=Tags.PROBE,
    severity=Severity.WARN,
    hint="Compare the named group's hosts with its siblings': a degraded link (PCIe/NVLink width, "
    "IB port speed), a busy or throttled GPU, or a wrong NIC; see the localization findings.",
)
def straggler_group(straggler: Straggler, ratio: float) -> Iterable[Problem]:
    """A group of a mesh dimension is well below its siblings (--straggler-ratio, at the largest size).

    All groups of a dimension run the same collective at once, so they should reach the same
    bus bandwidth. A group below the ratio times the median of the others is a straggler.
    """
    s = straggler
    yield Problem(
        f"{s.op} on {s.dim} group {s.group_index} (ranks {_ranks(s.ranks)}) at {human_bytes(s.size_bytes)}: busbw "
        f"{s.busbw_gbps:.3g} GB/s is {s.busbw_gbps / s.siblings_median_gbps:.0%} of its siblings' median "
        f"{s.siblings_median_gbps:.3g} GB/s (threshold {ratio:.0%})",
        ranks=s.ranks, hosts=s.hosts,
        data={"dim": s.dim, "op": s.op, "group_index": s.group_index, "busbw_gbps": s.busbw_gbps,
              "siblings_median_gbps": s.siblings_median_gbps},
    )


@engine_check(
    "BW004",
    tag=Tags.PROBE,
    severity=Severity.WARN,
    hint="The rank sits in slow groups of several dimensions: suspect its GPU, its host or its NIC.",
)
def cross_dim_suspect(rank: int, host: str, dims: list[str]) -> Iterable[Problem]:
    """A rank is in slow groups of two or more mesh dimensions, so it is the likely cause."""
    yield Problem(f"rank {rank} ({host}) is in slow groups of dimensions {', '.join(dims)}",
                  ranks=[rank], hosts=[host] if host else [], data={"dims": dims})


@engine_check(
    "BW005",
    tag=Tags.PROBE,
    severity=Severity.WARN,
    hint="Every pair with this host is slow: check its NIC (link speed, errors, MTU), its "
    "traffic shaping and its cabling; exclude it if it stays slow.",
    blames_host=True,
)
def slow_host(rank: int, host: str, fraction: float, median_gbps: float) -> Iterable[Problem]:
    """The pairwise send/recv round robin found a rank whose pairs are all slow: its host is slow.

    Within the slow groups (plus one healthy sibling for reference), n-1 rounds of disjoint
    pairs exchange a buffer both ways. A rank whose median pair bandwidth is below
    --straggler-ratio times the median of all pairs names its host.
    """
    yield Problem(f"pairwise send/recv: rank {rank} ({host}) reaches {fraction:.0%} of the median pair "
                  f"bandwidth {median_gbps:.3g} GB/s with every peer", ranks=[rank],
                  hosts=[host] if host else [], data={"fraction": fraction})


@engine_check(
    "BW006",
    tag=Tags.PROBE,
    severity=Severity.WARN,
    hint="Only this pair is slow while both ends are fast with others: check the link or switch "
    "port between them.",
)
def slow_link(ranks: list[int], hosts: list[str], fraction: float) -> Iterable[Problem]:
    """The pairwise round robin found one slow pair between two otherwise fast ranks: a link."""
    yield Problem(f"pairwise send/recv: the link between ranks {_ranks(ranks)} ({' - '.join(hosts)}) "
                  f"reaches {fraction:.0%} of the median pair bandwidth", ranks=ranks, hosts=hosts,
                  data={"fraction": fraction})


@engine_check(
    "BW007",
    tag=Tags.PROBE,
    severity=Severity.ERROR,
    hint="The dimension is below 0.9x what --expect says its links deliver: check the links "
    "(NVLink/IB rate and width), NCCL's transport choice (NCCL_DEBUG=INFO) and the topology.",
)
def below_expected(result: ProbeResult, expected_gbps: float) -> Iterable[Problem]:
    """A group's bus bandwidth is below 0.9 x the figure --expect gives for its dimension."""
    r = result
    yield Problem(f"{r.op} on {r.dim} group {r.group_index} (ranks {_ranks(r.ranks)}) at {human_bytes(r.size_bytes)}: "
                  f"busbw {r.busbw_gbps:.3g} GB/s is {r.busbw_gbps / expected_gbps:.0%} of the expected "
                  f"{expected_gbps:.3g} GB/s", ranks=r.ranks, hosts=r.hosts,
                  data={"dim": r.dim, "op": r.op, "busbw_gbps": r.busbw_gbps, "expected_busbw_gbps": expected_gbps})


@engine_check(
    "BW008",
    tag=Tags.PROBE,
    severity=Severity.WARN,
    hint="Put the innermost mesh dimension (tp) inside one host: reorder --mesh or the launcher's "
    "rank placement so each tp group shares NVLink instead of the network.",
)
def dim_spans_hosts(dim: str, groups: int, total: int, example_ranks: list[int],
                    example_hosts: list[str]) -> Iterable[Problem]:
    """A tp group (or the innermost dimension's) spans hosts: it will run over the network, not NVLink."""
    yield Problem(f"{groups} of {total} {dim} group(s) span hosts, e.g. ranks {_ranks(example_ranks)} on "
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
    named = f" on rank(s) {_ranks(ranks)}" if ranks else ""
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
