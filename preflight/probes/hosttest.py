"""Group testing among hosts over real sub-communicators: the probes' side of grouptest.py.

When the confirmed slow groups span several hosts and at least two hosts sit in no slow
group (the known-good hosts), rank 0 runs grouptest.locate over the suspect hosts for real:
each test is an all_reduce at the plan's largest size over a sub-communicator made of the
pool's hosts (every rank on them) plus one known-good partner host. A reference all_reduce
over two known-good hosts is measured in every round, its iterations alternating with the
pools' (each after a control barrier), so load that comes and goes on a shared machine
weighs on both alike. A pool is slow when every one of its iterations is below
--straggler-ratio x that round's reference median; one iteration as fast clears it, so
noise clears rather than blames. A single host is named only when it tests slow twice, the
second time with another partner where there is one (grouptest.locate's confirmation).

Rounds. Rank 0 decides each round from the last one's outcome and publishes its pools in the
store (`gt/<round>`); every rank reads them and creates every group it has not made yet
with dist.new_group, in the same order (torch requires every rank to create every group,
members or not; the reference's is made once), the members measure, and rank 0 reads their
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

import math
import statistics
import time
from typing import Any

from msgspec import Struct, field

from preflight.channel import keys
from preflight.channel.board import BadValue
from preflight.model.messages import RoundPlan, RoundTimes
from preflight.probes import grouptest, ops, timing
from preflight.probes.timing import ProbeFailed, ProbeTimeout, barrier, timed_loop

ABORTS = (ProbeTimeout, ProbeFailed, RuntimeError)


class HostSets(Struct):
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
    level, the confirmation, and one round of slack (a retest after noise)."""
    return 2 * math.ceil(math.log2(max(2, suspect_hosts))) + 2


def possible(sets: HostSets) -> bool:
    """Group testing needs suspects on two hosts or more and two known-good hosts (a reference pair)."""
    return len(sets.suspects) >= 2 and len(sets.good) >= 2


def choose(sets: HostSets, pairwise_ranks: int, mode: str = "auto") -> str:
    """"grouptest" when it can run and the round robin over `pairwise_ranks` ranks would take more
    rounds than rounds_bound; else "pairwise" (group testing follows it only if it names nothing).

    mode (--localize): "pairwise" never group tests, "grouptest" group tests whenever it can run.
    """
    if not possible(sets) or mode == "pairwise":
        return "pairwise"
    if mode == "grouptest" or pairwise_ranks - 1 > rounds_bound(len(sets.suspects)):
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
    """Every iteration of the pool below ratio x the reference's median (its own round's reference).

    One iteration as fast as that clears the pool: noise can slow a healthy pool, never speed
    up a slow one. The reference's median, not its slowest iteration, so one stalled reference
    iteration does not hide a slow pool.
    """
    if not samples or not reference:
        return False
    return max(samples) < ratio * statistics.median(reference)


class HostVerdict(Struct):
    """A host group testing named, with the figures of its single-host tests."""

    host: str
    ranks: list[int]
    fractions: list[float]  # each slow single-host test's median / the reference median
    partners: list[str]  # the known-good host of each of those tests


class GroupTestOutcome(Struct):
    """What group testing found and cost."""

    named: list[HostVerdict]
    suspects: list[str]
    good: list[str]
    rounds: int
    tests: int
    cleared: int
    seconds: float
    reference_gbps: float  # the median of the rounds' reference medians
    reference_hosts: list[str]
    history: list[list[tuple[int, bool]]] = field(default_factory=list)


class _Rounds:
    """Rank 0's side of the rounds: publish a round, take part, read the members' times."""

    def __init__(self, session: Any, reference: list[int]) -> None:
        self.session = session
        self.reference = reference
        self.index = 0
        self.groups: dict[tuple[int, ...], Any] = {}

    def run(self, pools: list[list[int]]) -> tuple[list[float], list[list[float]]]:
        """Measure the reference, then `pools` (global ranks) at once, iteration by iteration:
        the reference's per-iteration busbw and, per pool, its own ([] if a member is silent)."""
        r = self.index
        self.index += 1
        self.session.board.put(keys.ROUND.at(r), RoundPlan(self.reference, pools))
        nbytes = take_part(self.session, r, self.reference, pools, self.groups)
        return self._figures(r, "reference", self.reference, nbytes), \
            [self._figures(r, "pool", pool, nbytes) for pool in pools]

    def _figures(self, r: int, phase: str, members: list[int], nbytes: int) -> list[float]:
        times = []
        for rank in members:
            got = self.session.board.wait(keys.ROUND_TIMES.at(r, rank), rank, self.session.timeout_s)
            if got is None:
                raise ProbeTimeout(f"group testing: rank {rank} did not report round {r}")
            if isinstance(got, BadValue):
                self.session.kept(got)
                raise ProbeFailed(f"group testing: {got.line()}")
            times.append(got.reference if phase == "reference" else got.pool)
        return pool_gbps(times, nbytes)

    def finish(self) -> None:
        """Release every rank from the rounds."""
        self.session.board.put(keys.ROUND.at(self.index), RoundPlan(done=True))


def skip(session: Any) -> None:
    """Rank 0: no group testing this time (ranks told that it may follow stop waiting)."""
    session.board.put(keys.ROUND.at(0), RoundPlan(done=True))


def lead(session: Any, sets: HostSets, ratio: float) -> GroupTestOutcome | None:
    """Rank 0: group testing over the suspects against the known-good hosts; None when it could not finish."""
    began = time.monotonic()
    ranks_of = sets.ranks
    reference_hosts = sets.good[:2]
    rounds = _Rounds(session, sorted(r for h in reference_hosts for r in ranks_of[h]))
    per_round = 1 if session.kind == "cpu" else len(sets.good)
    singles: dict[str, list[tuple[float, str]]] = {}
    last_partner: dict[str, str] = {}
    references: list[float] = []

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
        reference, figures = rounds.run(members)
        if not reference:
            raise ProbeFailed("group testing: no figures for the reference")
        references.append(statistics.median(reference))
        slow = []
        for pool, partner, samples in zip(pools, partners, figures):
            if not samples:
                raise ProbeFailed(f"group testing: no figures for hosts {pool}")
            verdict = is_slow(samples, reference, ratio)
            if len(pool) == 1:
                last_partner[pool[0]] = partner
                if verdict:
                    singles.setdefault(pool[0], []).append((statistics.median(samples) / references[-1], partner))
            slow.append(verdict)
        return slow

    try:
        found = grouptest.locate(sets.suspects, per_round, test, known_slow=True)
    except ABORTS as exc:
        session.gave_up(exc, "group testing")
        return None
    finally:
        rounds.finish()
    named = [HostVerdict(h, ranks_of[h], [f for f, _ in singles.get(h, [])], [p for _, p in singles.get(h, [])])
             for h in found.bad]
    reference_gbps = statistics.median(references) if references else 0.0
    return GroupTestOutcome(named, list(sets.suspects), list(sets.good), found.rounds, found.tests, found.cleared,
                            time.monotonic() - began, reference_gbps, reference_hosts, found.history)


def follow(session: Any) -> None:
    """A non-zero rank: take part in every round rank 0 publishes, until it says done (or goes silent)."""
    wait_s = 2 * session.timeout_s + 10
    groups: dict[tuple[int, ...], Any] = {}
    size = session.world.world_size
    r = 0
    while True:
        plan = session.kept(session.board.wait(keys.ROUND.at(r), 0, wait_s))
        if plan is None or plan.done:
            return
        if any(not 0 <= m < size for m in [*plan.reference, *(m for p in plan.pools for m in p)]):
            return  # not rank 0's plan: ranks outside this world
        try:
            take_part(session, r, list(plan.reference), [list(p) for p in plan.pools], groups)
        except ABORTS as exc:
            session.gave_up(exc, "group testing")
            return
        r += 1


def _groups_for(session: Any, wanted: list[list[int]], groups: dict[tuple[int, ...], Any]) -> None:
    """Create the groups not made yet, in the order given: every rank sees the same rounds, so every
    rank creates the same groups in the same order (torch requires it of members and non-members).

    In a helper thread, on torch's own store client (probes/liveness.off_main_thread): a group's
    creation waits in the store for every rank, and this thread must stay free for a signal."""
    from preflight.probes import liveness, setup

    abort = timing.abort_check or (lambda: "")
    try:
        liveness.off_main_thread(lambda: _make_groups(session, wanted, groups),
                                 session.timeout_s + setup.SETUP_GRACE_S, abort)
    except liveness.StillRunning as exc:
        raise ProbeTimeout(f"creating the group testing's groups: {exc}") from None


def _make_groups(session: Any, wanted: list[list[int]], groups: dict[tuple[int, ...], Any]) -> None:
    import contextlib

    import torch.distributed as dist

    from preflight.probes.session import probe_nccl_env

    session.enter_device()  # a new thread starts on device 0: the bound GPU first (CUDA's is per thread)
    env = probe_nccl_env() if session.kind == "cuda" else contextlib.nullcontext()
    with env:
        for ranks in wanted:
            key = tuple(ranks)
            if key in groups:
                continue
            groups[key] = dist.new_group(ranks=ranks, backend=session.backend)
            if session.owner == "job" and session.world.rank in ranks:
                session.owned.append(groups[key])  # preflight.check: torn down with preflight's own groups


def take_part(session: Any, r: int, reference: list[int], pools: list[list[int]],
              groups: dict[tuple[int, ...], Any]) -> int:
    """Every rank: round r. The reference and the pools alternate, one iteration each, after a
    control barrier each: load that comes and goes on shared machines weighs on both alike.
    A member reports its per-iteration seconds ({"reference": [...], "pool": [...]}).

    Returns the bytes each all_reduce moved (what rank 0 needs for busbw).
    """
    import torch

    rank, plan = session.world.rank, session.plan
    _groups_for(session, [reference, *pools], groups)
    size = max(plan.sizes)
    deadline = time.monotonic() + session.timeout_s
    elem = torch.tensor([], dtype=session.dtype).element_size()
    nbytes = ops.element_counts("all_reduce", size, 2, elem)[1]
    phases = [("reference", reference), *[("pool", pool) for pool in pools if rank in pool][:1]]
    starts = {}
    for phase, members in phases:
        if rank in members:
            me = members.index(rank)
            buffers = ops.make_buffers("all_reduce", size, me, len(members), session.dtype, session.device)
            group = groups[tuple(members)]
            starts[phase] = lambda b=buffers, g=group, m=members, i=me: ops.launch(b, g, m, i)
    times: dict[str, list[float]] = {phase: [] for phase in starts}
    for i in range(plan.warmup + plan.iters):
        for phase in ("reference", "pool"):
            barrier(session.control, deadline)
            if phase in starts:
                took = timed_loop(starts[phase], 1, deadline, session.device, cuda=session.cuda, per_iteration=True)
                if i >= plan.warmup:
                    times[phase] += took
    if times:
        session.board.put(keys.ROUND_TIMES.at(r, rank), RoundTimes(times.get("reference", []), times.get("pool", [])))
    barrier(session.control, time.monotonic() + session.timeout_s)
    return nbytes
