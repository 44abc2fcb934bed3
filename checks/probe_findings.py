"""Collective probes: wrong data, hangs, slow groups, slow hosts and links, missed expectations.

Engine-scope checks: the probes (preflight/probes/) measure and judge; these turn what they
found into findings with one id, one severity and one hint each.
"""

from __future__ import annotations

from collections.abc import Iterable

from preflight.lib.units import human_bytes
from preflight.model import Severity
from preflight.registry import ENGINE, Problem, check


def _ranks(ranks: Iterable[int]) -> str:
    return ",".join(str(r) for r in ranks)


@check(
    "BW001",
    tag="probe",
    scope=ENGINE,
    severity=Severity.ERROR,
    hint="Wrong data is never a slow link: drain the named ranks' hosts and run GPU memory and "
    "NIC diagnostics (dcgmi diag -r 3, ibv_rc_pingpong) before any training on them.",
)
def wrong_result(dim: str, op: str, sizes: list[int], group_index: int, ranks: list[int], hosts: list[str],
                 wrong_ranks: list[int], bad_sources: list[int]) -> Iterable[Problem]:
    """A collective returned a wrong value.

    Every probe uses rank-dependent inputs with one known result. A wrong element is
    attributed to the rank whose data it carried (its source in all_to_all, all_gather,
    broadcast and send/recv; its owner in all_reduce and reduce_scatter, where each element
    is nonzero on exactly one rank), and the ranks that received wrong values are listed.
    """
    culprits = bad_sources or wrong_ranks
    yield Problem(
        f"{op} on {dim} group {group_index} (ranks {_ranks(ranks)}) returned wrong data at "
        f"{', '.join(human_bytes(size) for size in sorted(sizes))}: "
        f"data from rank(s) {_ranks(bad_sources) or '?'} arrived wrong on rank(s) {_ranks(wrong_ranks)}",
        ranks=culprits, hosts=[h for r, h in zip(ranks, hosts) if r in culprits],
        data={"dim": dim, "op": op, "sizes": sorted(sizes), "group_index": group_index,
              "wrong_ranks": wrong_ranks, "bad_sources": bad_sources, "host_fault": True},
    )


@check(
    "BW002",
    tag="probe",
    scope=ENGINE,
    severity=Severity.ERROR,
    hint="The named ranks were not in the collective with their group: look at their logs and "
    "hosts (a crashed or hung process, a desynchronised code path, a dead link); the waiting "
    "ranks are victims.",
)
def probe_hang(dim: str, op: str, size_bytes: int, group_index: int, culprits: dict[int, str],
               waiting: list[int], hosts: dict[int, str], timeout_s: float, elapsed_s: float,
               failed: bool, reason: str, reported_after_s: float = 0.0) -> Iterable[Problem]:
    """A collective did not finish within --probe-timeout (or failed), and who caused it.

    Each op has a deadline. When it expires the rank stops probing and records, in the c10d
    store (never through the stuck communicator), where it stopped; rank 0 compares every
    rank's position and names the ranks that were not in the step with their group: ranks
    that moved past it (skipped the op or returned early) and ranks that never reached it.
    """
    group = f"{dim} group {group_index}" if group_index >= 0 else "the control barrier"
    what = f"{op} on {group} at {human_bytes(size_bytes)}" if op else "the probes"
    how = "failed" if failed else f"did not finish within {timeout_s:g}s"
    named = "; ".join(f"rank {r}: {why}" for r, why in sorted(culprits.items()))
    yield Problem(
        f"{what} {how}: {named}" + (f" (waiting: ranks {_ranks(waiting)})" if waiting else "")
        + (f" [{reason}]" if failed and reason else ""),
        ranks=sorted(culprits), hosts=[hosts.get(r, "") for r in sorted(culprits) if hosts.get(r)],
        data={"dim": dim, "op": op, "size_bytes": size_bytes, "group_index": group_index,
              "culprits": {str(k): v for k, v in culprits.items()}, "waiting": waiting,
              "detected_after_s": round(elapsed_s, 3), "reported_after_s": round(reported_after_s, 3),
              "host_fault": True},
    )


@check(
    "BW003",
    tag="probe",
    scope=ENGINE,
    severity=Severity.WARN,
    hint="Compare the named group's hosts with its siblings': a degraded link (PCIe/NVLink width, "
    "IB port speed), a busy or throttled GPU, or a wrong NIC; see the localization findings.",
)
def straggler_group(dim: str, op: str, size_bytes: int, group_index: int, ranks: list[int], hosts: list[str],
                    busbw_gbps: float, siblings_median_gbps: float, ratio: float) -> Iterable[Problem]:
    """A group of a mesh dimension is well below its siblings (--straggler-ratio, at the largest size).

    All groups of a dimension run the same collective at once, so they should reach the same
    bus bandwidth. A group below the ratio times the median of the others is a straggler.
    """
    yield Problem(
        f"{op} on {dim} group {group_index} (ranks {_ranks(ranks)}) at {human_bytes(size_bytes)}: busbw "
        f"{busbw_gbps:.3g} GB/s is {busbw_gbps / siblings_median_gbps:.0%} of its siblings' median "
        f"{siblings_median_gbps:.3g} GB/s (threshold {ratio:.0%})",
        ranks=ranks, hosts=hosts,
        data={"dim": dim, "op": op, "group_index": group_index, "busbw_gbps": busbw_gbps,
              "siblings_median_gbps": siblings_median_gbps},
    )


@check(
    "BW004",
    tag="probe",
    scope=ENGINE,
    severity=Severity.WARN,
    hint="The rank sits in slow groups of several dimensions: suspect its GPU, its host or its NIC.",
)
def cross_dim_suspect(rank: int, host: str, dims: list[str]) -> Iterable[Problem]:
    """A rank is in slow groups of two or more mesh dimensions, so it is the likely cause."""
    yield Problem(f"rank {rank} ({host}) is in slow groups of dimensions {', '.join(dims)}",
                  ranks=[rank], hosts=[host] if host else [], data={"dims": dims})


@check(
    "BW005",
    tag="probe",
    scope=ENGINE,
    severity=Severity.WARN,
    hint="Every pair with this host is slow: check its NIC (link speed, errors, MTU), its "
    "traffic shaping and its cabling; exclude it if it stays slow.",
)
def slow_host(rank: int, host: str, fraction: float, median_gbps: float) -> Iterable[Problem]:
    """The pairwise send/recv round robin found a rank whose pairs are all slow: its host is slow.

    Within the slow groups (plus one healthy sibling for reference), n-1 rounds of disjoint
    pairs exchange a buffer both ways. A rank whose median pair bandwidth is below
    --straggler-ratio times the median of all pairs names its host.
    """
    yield Problem(f"pairwise send/recv: rank {rank} ({host}) reaches {fraction:.0%} of the median pair "
                  f"bandwidth {median_gbps:.3g} GB/s with every peer", ranks=[rank],
                  hosts=[host] if host else [], data={"fraction": fraction, "host_fault": True})


@check(
    "BW006",
    tag="probe",
    scope=ENGINE,
    severity=Severity.WARN,
    hint="Only this pair is slow while both ends are fast with others: check the link or switch "
    "port between them.",
)
def slow_link(ranks: list[int], hosts: list[str], fraction: float) -> Iterable[Problem]:
    """The pairwise round robin found one slow pair between two otherwise fast ranks: a link."""
    yield Problem(f"pairwise send/recv: the link between ranks {_ranks(ranks)} ({' - '.join(hosts)}) "
                  f"reaches {fraction:.0%} of the median pair bandwidth", ranks=ranks, hosts=hosts,
                  data={"fraction": fraction})


@check(
    "BW007",
    tag="probe",
    scope=ENGINE,
    severity=Severity.ERROR,
    hint="The dimension is below 0.9x what --expect says its links deliver: check the links "
    "(NVLink/IB rate and width), NCCL's transport choice (NCCL_DEBUG=INFO) and the topology.",
)
def below_expected(dim: str, op: str, size_bytes: int, group_index: int, ranks: list[int], hosts: list[str],
                   busbw_gbps: float, expected_gbps: float) -> Iterable[Problem]:
    """A group's bus bandwidth is below 0.9 x the figure --expect gives for its dimension."""
    yield Problem(f"{op} on {dim} group {group_index} (ranks {_ranks(ranks)}) at {human_bytes(size_bytes)}: busbw "
                  f"{busbw_gbps:.3g} GB/s is {busbw_gbps / expected_gbps:.0%} of the expected "
                  f"{expected_gbps:.3g} GB/s", ranks=ranks, hosts=hosts,
                  data={"dim": dim, "op": op, "busbw_gbps": busbw_gbps, "expected_busbw_gbps": expected_gbps})


@check(
    "BW008",
    tag="probe",
    scope=ENGINE,
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


@check(
    "BW009",
    tag="probe",
    scope=ENGINE,
    severity=Severity.COULD_NOT_RUN,
    hint="The process group or DeviceMesh could not be built: check --backend (nccl needs a GPU "
    "per rank) and the error; the collectives are unverified.",
)
def probes_could_not_run(reason: str) -> Iterable[Problem]:
    """The probes could not start: process group, DeviceMesh or backend failed.

    Without a process group nothing about the collectives is known: not their speed, not
    whether they return correct data, not whether they hang. The usual causes are
    `--backend nccl` on a rank without a GPU or on a torch built without NCCL, a mesh the
    world cannot hold, or a rank that left before the process group formed.
    """
    yield Problem(f"probes could not run: {reason}")
