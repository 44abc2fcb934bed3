"""Localization: a pairwise send/recv round robin over the ranks of the slow groups.

n-1 rounds of disjoint pairs (the circle method), all pairs of a round at once; each pair
exchanges one buffer both ways. A rank whose pairs are all slow is the slow host; a single
slow pair between two otherwise fast ranks is a slow link.
"""

from __future__ import annotations

import statistics
import time
from typing import Any

from msgspec import Struct

from preflight.probes.timing import ProbeFailed, ProbeTimeout, barrier, timed_loop


def exchange_bytes(size_bytes: int) -> int:
    """The bytes each direction of a pair's exchange at `size_bytes` is counted as carrying (whole
    4-byte elements, at least one): the one figure every pair bandwidth is computed from."""
    return max(1, size_bytes // 4) * 4


def round_robin(ranks: list[int]) -> list[list[tuple[int, int]]]:
    """Rounds of disjoint pairs covering every pair once (circle method; a bye when odd)."""
    players: list[int | None] = list(ranks)
    if len(players) % 2:
        players.append(None)
    n = len(players)
    rounds = []
    for _ in range(n - 1):
        pairs = []
        for i in range(n // 2):
            a, b = players[i], players[n - 1 - i]
            if a is not None and b is not None:
                pairs.append((min(a, b), max(a, b)))
        rounds.append(pairs)
        players = [players[0], players[-1], *players[1:-1]]
    return rounds


def run_rounds(rank: int, ranks: list[int], size_bytes: int, iters: int, control: Any, timeout_s: float, *,
               group: Any = None, device: Any = "cpu", dtype: Any = None, cuda: Any = None,
               rounds: list[list[tuple[int, int]]] | None = None) -> dict[int, list[float]]:
    """Every rank of the world takes part in the barriers; members of `ranks` exchange.

    The exchange runs on `group` with `device` buffers: the probe's own backend and devices
    (Session.localization() gives them: NCCL on the bound GPU, or gloo on CPU), so a slow
    NVLink or IB path is measured where it is used. Without `group` it runs on the control
    group (gloo, CPU). Barriers stay on the control group. Returns peer -> seconds of each
    two-way exchange (iters back to back, one figure per iteration, timing.timed_loop), for
    this rank's pairs. `rounds` replaces the round robin (the confirming pass runs one pair
    per round: a pair measured alone, nothing else on the wire or the CPUs).
    """
    import torch
    import torch.distributed as dist

    group = control if group is None else group
    dtype = dtype or (torch.bfloat16 if torch.device(device).type == "cuda" else torch.float32)
    elem = torch.tensor([], dtype=dtype).element_size()
    count = max(1, size_bytes // elem)
    send = torch.ones(count, dtype=dtype, device=device)
    recv = torch.zeros(count, dtype=dtype, device=device)
    times: dict[int, list[float]] = {}
    for pairs in round_robin(ranks) if rounds is None else rounds:
        deadline = time.monotonic() + timeout_s
        barrier(control, deadline)
        peer = next((b if a == rank else a for a, b in pairs if rank in (a, b)), None)
        if peer is None:
            continue

        def exchange(peer: int = peer) -> list[Any]:
            # The lower rank sends first: NCCL pairs point-to-point calls in order.
            first, second = (dist.isend, dist.irecv) if rank < peer else (dist.irecv, dist.isend)
            buffers = (send, recv) if rank < peer else (recv, send)
            return [first(buffers[0], peer, group=group), second(buffers[1], peer, group=group)]

        try:
            timed_loop(exchange, 1, deadline, device, cuda=cuda)  # warm the connection (and the pair's communicator)
            times.setdefault(peer, []).extend(timed_loop(exchange, iters, deadline, device, cuda=cuda,
                                                         per_iteration=True))
        except (ProbeTimeout, ProbeFailed) as exc:  # name the peer this rank was stuck with
            stuck = type(exc)(f"its exchange with rank {peer} did not complete: {exc}")
            stuck.peer = peer
            raise stuck from exc
    barrier(control, time.monotonic() + timeout_s)
    return times


class Localized(Struct):
    """What the round robin found: slow ranks (hosts) and slow links between fast ranks."""

    slow_ranks: dict[int, float]  # rank -> its median pair bandwidth / everyone's median
    slow_links: dict[tuple[int, int], float]  # pair -> its bandwidth / everyone's median
    median_gbps: float


def judge_pairs(pair_gbps: dict[tuple[int, int], float], ratio: float) -> Localized:
    """Name ranks whose median pair bandwidth is below ratio x the median of all pairs, then links."""
    if not pair_gbps:
        return Localized({}, {}, 0.0)
    overall = statistics.median(pair_gbps.values())
    per_rank: dict[int, list[float]] = {}
    for (a, b), bw in pair_gbps.items():
        per_rank.setdefault(a, []).append(bw)
        per_rank.setdefault(b, []).append(bw)
    slow_ranks = {r: statistics.median(v) / overall for r, v in sorted(per_rank.items())
                  if overall > 0 and statistics.median(v) < ratio * overall}
    slow_links = {pair: bw / overall for pair, bw in sorted(pair_gbps.items())
                  if overall > 0 and bw < ratio * overall and not (set(pair) & set(slow_ranks))}
    return Localized(slow_ranks, slow_links, overall)
