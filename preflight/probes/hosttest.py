"""Group testing among hosts over real sub-communicators: the probes' side of grouptest.py.

When the confirmed slow groups span several hosts and at least two hosts sit in no slow
group (the known-good hosts), rank 0 runs grouptest.locate over the suspect hosts for real:
each test is an all_reduce at the plan's largest size over a sub-communicator made of the
pool's hosts (every rank on them) plus one known-good partner host. A reference all_reduce
over two known-good hosts is measured first, alone. A pool is slow when its median busbw is
below --straggler-ratio x the reference's and every iteration of it is below every reference
iteration (the complete separation of judge.py); anything less is fast, so noise clears
rather than blames. A single host is named only when it tests slow twice, the second time
with another partner where there is one (grouptest.locate's confirmation).

Rounds. Rank 0 decides each round from the last one's outcome and publishes its pools in the
store (`gt/<round>`); every rank reads them and creates every pool's group with
dist.new_group, in the same order (torch requires every rank to create every group, members
or not), then all meet at a control barrier, the members measure, and rank 0 reads their
per-iteration times from the store. `gt/<round>` = {"done": true} ends it. On CPU (gloo) the
pools of a round share the machine's cores, so one pool is measured per round; on GPUs every
pool of a round runs at once, each with its own partner (as many pools as known-good hosts).

When (choose): the pairwise round robin (pairwise.py) costs n-1 rounds over n ranks, judges
each rank against the median of its own pairs, and also names single slow links and
intra-host paths; group testing costs about 2 log2(h) + 2 rounds for one bad host among h
suspect hosts and judges against known-good hosts. So group testing runs at once when the
round robin would take more rounds than that bound; otherwise the round robin runs first
and group testing only when it named nothing. Its yardstick is the median of its own pairs:
with as many slow hosts as healthy ones among its ranks that median is a slow pair, every
rank looks like its peers, and what it names is a guess (two slow hosts read as one slow link
between them). So when fewer than half of its pairs reach --straggler-ratio x the pairs
between known-good ranks (round_robin_trusted), its candidates are dropped unconfirmed and
group testing decides.
"""

from __future__ import annotations

import json
import math
import statistics
import time
from dataclasses import dataclass, field
from typing import Any

from preflight.lib.waiting import wait_until
from preflight.probes import grouptest, ops
from preflight.probes.timing import ProbeFailed, ProbeTimeout, barrier, timed_loop

PREFIX = "gt"  # store keys: gt/<round> (rank 0's plan), gt/<round>/t/<rank> (a member's times)
ABORTS = (ProbeTimeout, ProbeFailed, RuntimeError)


@dataclass
class HostSets:
    """Hosts of the confirmed slow groups (suspects), hosts in none (known-good), ranks per host."""

    suspects: list[str]
    good: list[str]
    ranks: dict[str, list[int]]


def host_sets(slow_ranks: set[int], hosts: dict[int, str], world_size: int) -> HostSets:
    """Suspects and known-good hosts, ordered by their lowest rank (the same order on every run)."""
    by_host: dict[str, list[int]] = {}
    for rank in range(world_size):
        by_host.setdefault(hosts.get(rank) or f"rank{rank}", []).append(rank)
    order = sorted(by_host, key=lambda h: by_host[h][0])
    suspects = [h for h in order if set(by_host[h]) & slow_ranks]
    good = [h for h in order if not set(by_host[h]) & slow_ranks]
    return HostSets(suspects, good, by_host)


def rounds_bound(suspect_hosts: int) -> int:
    """Rounds group testing needs for one bad host, one pool per round: both halves of every
    level, the confirmation and the reference."""
    return 2 * math.ceil(math.log2(max(2, suspect_hosts))) + 2


def possible(sets: HostSets) -> bool:
    """Group testing needs suspects on two hosts or more and two known-good hosts (a reference pair)."""
    return len(sets.suspects) >= 2 and len(sets.good) >= 2


def choose(sets: HostSets, pairwise_ranks: int) -> str:
    """"grouptest" when it can run and the round robin over `pairwise_ranks` ranks would take more
    rounds than rounds_bound; else "pairwise" (group testing follows it only if it names nothing)."""
    if possible(sets) and pairwise_ranks - 1 > rounds_bound(len(sets.suspects)):
        return "grouptest"
    return "pairwise"


def round_robin_trusted(pair_gbps: dict[tuple[int, int], float], good_ranks: set[int], ratio: float) -> bool:
    """Whether the round robin's yardstick, the median of all its pairs, is a healthy pair's figure.

    False when fewer than half of its pairs reach ratio x the median of the pairs between
    known-good ranks (the upper median is below that): then most pairs are slow (as many slow
    hosts as healthy ones among its ranks), every rank looks like its peers and whatever it
    names is a guess. Without a known-good pair it is trusted.
    """
    good = [bw for (a, b), bw in pair_gbps.items() if a in good_ranks and b in good_ranks]
    if not good or not pair_gbps:
        return True
    return statistics.median_high(pair_gbps.values()) >= ratio * statistics.median(good)


def pool_gbps(member_times: list[list[float]], nbytes: int) -> list[float]:
    """Per-iteration busbw of one pool's all_reduce: each iteration bounded by its slowest member."""
    n = len(member_times)
    if n < 2 or not all(member_times):
        return []
    iters = min(len(t) for t in member_times)
    return [ops.busbw_gbps("all_reduce", n, nbytes, max(t[i] for t in member_times)) for i in range(iters)]


def is_slow(samples: list[float], reference: list[float], ratio: float) -> bool:
    """Below ratio x the reference's median, and every iteration below every reference iteration."""
    if not samples or not reference:
        return False
    return statistics.median(samples) < ratio * statistics.median(reference) and max(samples) < min(reference)


@dataclass
class HostVerdict:
    """A host group testing named, with the figures of its single-host tests."""

    host: str
    ranks: list[int]
    fractions: list[float]  # each slow single-host test's median / the reference median
    partners: list[str]  # the known-good host of each of those tests


@dataclass
class GroupTestOutcome:
    """What group testing found and cost (rounds include the reference's)."""

    named: list[HostVerdict]
    suspects: list[str]
    good: list[str]
    rounds: int
    tests: int
    cleared: int
    seconds: float
    reference_gbps: float
    reference_hosts: list[str]
    history: list[list[tuple[int, bool]]] = field(default_factory=list)


class _Rounds:
    """Rank 0's side of the rounds: publish a round, take part, read the members' times."""

    def __init__(self, session: Any) -> None:
        self.session = session
        self.index = 0

    def run(self, pools: list[list[int]]) -> list[list[float]]:
        """Measure `pools` (global ranks) at once; per pool, its per-iteration busbw ([] if a member is silent)."""
        store, r = self.session.store, self.index
        self.index += 1
        store.set(f"{PREFIX}/{r}", json.dumps({"pools": pools}))
        nbytes = take_part(self.session, r, pools)
        out = []
        for pool in pools:
            times = []
            for rank in pool:
                key = f"{PREFIX}/{r}/t/{rank}"
                if not wait_until(lambda key=key: store.check([key]), self.session.timeout_s):
                    raise ProbeTimeout(f"group testing: rank {rank} did not report round {r}")
                times.append(json.loads(store.get(key)))
            out.append(pool_gbps(times, nbytes))
        return out

    def finish(self) -> None:
        """Release every rank from the rounds."""
        self.session.store.set(f"{PREFIX}/{self.index}", json.dumps({"done": True}))


def skip(session: Any) -> None:
    """Rank 0: no group testing this time (ranks told that it may follow stop waiting)."""
    session.store.set(f"{PREFIX}/0", json.dumps({"done": True}))


def lead(session: Any, sets: HostSets, ratio: float) -> GroupTestOutcome | None:
    """Rank 0: group testing over the suspects against the known-good hosts; None when it could not finish."""
    began = time.monotonic()
    rounds = _Rounds(session)
    ranks_of = sets.ranks
    reference_hosts = sets.good[:2]
    per_round = 1 if session.device == "cpu" else len(sets.good)
    singles: dict[str, list[tuple[float, str]]] = {}
    last_partner: dict[str, str] = {}
    try:
        reference = rounds.run([sorted(r for h in reference_hosts for r in ranks_of[h])])[0]
        if not reference:
            return None
        ref_median = statistics.median(reference)

        def test(pools: list[list[str]]) -> list[bool]:
            used: set[str] = set()
            members = []
            partners = []
            for pool in pools:
                avoid = last_partner.get(pool[0]) if len(pool) == 1 else None
                free = [g for g in sets.good if g not in used]
                partner = next((g for g in free if g != avoid), free[0])
                used.add(partner)
                partners.append(partner)
                members.append(sorted(r for h in [*pool, partner] for r in ranks_of[h]))
            figures = rounds.run(members)
            slow = []
            for pool, partner, samples in zip(pools, partners, figures):
                if not samples:
                    raise ProbeFailed(f"group testing: no figures for hosts {pool}")
                verdict = is_slow(samples, reference, ratio)
                if len(pool) == 1:
                    last_partner[pool[0]] = partner
                    if verdict:
                        singles.setdefault(pool[0], []).append((statistics.median(samples) / ref_median, partner))
                slow.append(verdict)
            return slow

        found = grouptest.locate(sets.suspects, per_round, test, known_slow=True)
    except ABORTS:
        return None
    finally:
        rounds.finish()
    named = [HostVerdict(h, ranks_of[h], [f for f, _ in singles.get(h, [])], [p for _, p in singles.get(h, [])])
             for h in found.bad]
    return GroupTestOutcome(named, list(sets.suspects), list(sets.good), found.rounds + 1, found.tests + 1,
                            found.cleared, time.monotonic() - began, ref_median, reference_hosts, found.history)


def follow(session: Any) -> None:
    """A non-zero rank: take part in every round rank 0 publishes, until it says done (or goes silent)."""
    store = session.store
    wait_s = 2 * session.timeout_s + 10
    r = 0
    while True:
        key = f"{PREFIX}/{r}"
        if not wait_until(lambda key=key: store.check([key]), wait_s):
            return
        plan = json.loads(store.get(key))
        if plan.get("done"):
            return
        try:
            take_part(session, r, [list(p) for p in plan["pools"]])
        except ABORTS:
            return
        r += 1


def take_part(session: Any, r: int, pools: list[list[int]]) -> int:
    """Every rank: create round r's groups (all of them, in order), measure this rank's pool, report.

    Returns the bytes each all_reduce moved (what rank 0 needs for busbw).
    """
    import contextlib

    import torch.distributed as dist

    from preflight.probes.session import probe_nccl_env

    rank, plan = session.world.rank, session.plan
    env = probe_nccl_env() if session.device == "cuda" else contextlib.nullcontext()
    with env:
        groups = [dist.new_group(ranks=pool, backend=session.backend) for pool in pools]
    mine = next((i for i, pool in enumerate(pools) if rank in pool), None)
    if mine is not None and session.owner == "job":
        session.owned.append(groups[mine])  # preflight.check: torn down with preflight's own groups
    size = max(plan.sizes)
    deadline = time.monotonic() + session.timeout_s
    barrier(session.control, deadline)
    import torch

    elem = torch.tensor([], dtype=session.dtype).element_size()
    nbytes = ops.element_counts("all_reduce", size, 2, elem)[1]
    if mine is not None:
        pool = pools[mine]
        me, n = pool.index(rank), len(pool)
        buffers = ops.make_buffers("all_reduce", size, me, n, session.dtype, session.device)
        nbytes = buffers.nbytes

        def start() -> list[Any]:
            return ops.launch(buffers, groups[mine], pool, me)

        if plan.warmup:
            timed_loop(start, plan.warmup, deadline, session.device, cuda=session.cuda)
        times = timed_loop(start, plan.iters, deadline, session.device, cuda=session.cuda, per_iteration=True)
        session.store.set(f"{PREFIX}/{r}/t/{rank}", json.dumps(times))
    barrier(session.control, time.monotonic() + session.timeout_s)
    return nbytes
