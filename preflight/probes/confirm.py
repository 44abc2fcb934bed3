"""Confirm before blaming: every suspect is measured a second time before a warning names it.

Two second passes, both led by rank 0 through the store (every rank follows, since every
rank sits in the control barriers):

- Groups. The steps where a straggler was found (judge.stragglers) run again on every group
  of their dimension at once, as in the first pass but with up to CALLS_PER_FIGURE times its
  calls, each figure the mean of that many back-to-back calls; the group's fastest siblings are
  its known-good partners, measured alongside. Only a group that is a straggler again
  (judge.confirm) is reported, with both passes' figures.
- Ranks and links. The pairwise round robin (pairwise.py) runs its pairs concurrently, so
  its verdicts are candidates. Each candidate is measured again alone, one pair at a time:
  a suspect rank against the known-good rank whose pairs were fastest, a suspect link between
  its own two ends, and a reference pair of two known-good ranks before and after, each figure
  the mean of up to CALLS_PER_FIGURE calls as in the groups' pass. Only a pair
  whose every figure stays below every reference figure, and whose median is below
  --straggler-ratio x the reference's, is reported (judge_confirmed), with both measurements.
"""

from __future__ import annotations

import statistics
import time
from typing import Any

import msgspec
from msgspec import Struct, field

from preflight.channel import keys
from preflight.model.messages import ConfirmPairs, PairSamples, RemeasureSteps, Status
from preflight.model.probe_faults import Confirmed, Straggler
from preflight.probes import collect, judge, ops, pairwise
from preflight.probes.timing import ProbeFailed, ProbeTimeout, barrier

AGAIN = keys.AGAIN.key  # rank 0 -> all: RemeasureSteps, the plan step indices to measure again
CONFIRM = keys.CONFIRM.key  # rank 0 -> all: ConfirmPairs, measured one at a time
SECOND = keys.SECOND_PREFIX  # the second pass's results, under their own prefix
ABORTS = (ProbeTimeout, ProbeFailed, RuntimeError)
# The confirming pass times this many calls for each figure the first pass timed one for, and judges the
# mean of each run of that many (the same count of figures, so the same spread rule and false-alarm chance).
# Its window must outlast the noise that made the candidate: on shared CPU cores (CI's gloo) the
# scheduler's slice is as long as a few small collectives, so five calls of a healthy group can all fall
# into slices its siblings held (healthy 4-rank dp2,tp2 runs on 2 cores at --iters 20, 160 steps judged:
# 3 such candidates on the first 5 calls, none on 5 figures of 4). Means, not every call: one call that a
# stall hit (a healthy sibling's 13 ms among 3 ms ones, a tbf-shaped host's 21 ms) no longer undoes a
# separation that every other call shows; a slow link or a sleeping rank slows every figure. Fewer where
# that many calls would overrun the step's deadline (calls_per_figure); rank 0 says how many, every rank
# times as many (RemeasureSteps, ConfirmPairs).
CALLS_PER_FIGURE = 4


def _follow_wait_s(session: Any) -> float:
    return 2 * session.timeout_s + 10


def _steps_of(session: Any, slow: list[Straggler]) -> list[int]:
    """Plan step indices of the stragglers' (dim, op) at the largest size measured."""
    steps = session.plan.steps()
    out = set()
    for s in slow:
        sizes = [size for dim, op, size in steps if dim == s.dim and op == s.op]
        if sizes:
            out.add(steps.index((s.dim, s.op, max(sizes))))
    return sorted(out)


def calls_per_figure(call_s: float, iters: int, timeout_s: float) -> int:
    """How many calls each figure of a second pass averages: CALLS_PER_FIGURE, fewer where that many of
    the slowest call the first pass saw (`call_s`) would fill over half a step's deadline. A degraded
    link at a large size (NCCL on sockets, 256 MiB at 1 GB/s) must not time out its own confirmation
    and be left unconfirmed; one call a figure is the first pass's own measurement."""
    if call_s <= 0 or iters <= 0:
        return CALLS_PER_FIGURE
    return max(1, min(CALLS_PER_FIGURE, int(timeout_s / 2 / (iters * call_s))))


def told_calls(calls: int) -> int:
    """Rank 0's calls per figure, as a follower takes it: bounded to 1..CALLS_PER_FIGURE."""
    return min(max(calls, 1), CALLS_PER_FIGURE)


def _remeasure(session: Any, steps: list[int], calls: int) -> None:
    """Run the given plan steps again on this rank, each figure the mean of `calls` calls, and publish
    them under the `second/` prefix."""

    from preflight.probes.steps import measure, publish

    plan_steps = session.plan.steps()
    records = []
    status = Status()
    try:
        for index in steps:
            dim, op, size = plan_steps[index]
            deadline = time.monotonic() + session.timeout_s
            barrier(session.control, deadline)
            record = measure(session, index, dim, op, size, deadline, iters=session.plan.iters * calls)
            records.append(msgspec.structs.replace(record, times_s=figures(record.times_s, calls)))
    except Exception as exc:  # any failure of the second pass leaves the first pass's verdict unconfirmed
        status = Status("failed", -1, "op", str(exc)[:200])
        session.gave_up(exc, "second pass")
    publish(session.board.under(SECOND), session.world.rank, session.world.host, records, status)


def figures(times_s: list[float], calls: int) -> list[float]:
    """The mean of each run of `calls` consecutive per-call times (a last, shorter run is its own mean)."""
    return [statistics.fmean(times_s[i:i + calls]) for i in range(0, len(times_s), calls)]


def lead_groups(session: Any, slow: list[Straggler], ratio: float) -> list[Straggler]:
    """Rank 0: have the stragglers' steps measured again by every rank; the stragglers found twice."""

    steps = _steps_of(session, slow)
    # The slowest call the first pass saw among them: the straggler's own (its busbw's time per call).
    call_s = max((ops.busbw_gbps(s.op, len(s.ranks), s.size_bytes, 1.0) / s.busbw_gbps
                  for s in slow if s.busbw_gbps > 0), default=0.0)
    calls = calls_per_figure(call_s, session.plan.iters, session.timeout_s)
    session.board.put(AGAIN, RemeasureSteps(steps, calls))
    if not steps:
        return []
    _remeasure(session, steps, calls)
    got = collect.gather(session.board.under(SECOND), session.world.world_size, session.timeout_s)
    session.bad_values.update({r: bad for r, bad in got.bad.items() if r not in session.bad_values})
    return judge.confirm(slow, collect.results(got, got.hosts()), ratio, calls_per_figure=calls)


def follow_groups(session: Any) -> bool:
    """A non-zero rank: measure again what rank 0 asks for; False when rank 0 never asked."""
    told = session.kept(session.board.wait(AGAIN, 0, _follow_wait_s(session)))
    if told is None:
        return False
    count = len(session.plan.steps())
    steps = [i for i in told.steps if 0 <= i < count]  # only steps of this plan
    if steps:
        _remeasure(session, steps, told_calls(told.calls_per_figure))
    return True


class PairVerdict(Struct):
    """What the confirming pass kept: slow ranks (against a known-good partner) and slow links."""

    slow_ranks: dict[int, Confirmed] = field(default_factory=dict)
    slow_links: dict[tuple[int, int], Confirmed] = field(default_factory=dict)
    pairs: list[tuple[int, int]] = field(default_factory=list)  # what was measured, in order


def plan_pairs(found: pairwise.Localized, pair_gbps: dict[tuple[int, int], float],
               ranks: list[int]) -> tuple[list[tuple[int, int]], list[tuple[int, int]], dict[int, int]]:
    """(pairs to measure in order, the reference pairs among them, suspect rank -> its partner).

    Known-good ranks are the round robin's ranks that no candidate names, fastest first (by
    their median pair bandwidth). Without one, nothing can be confirmed and nothing is measured.
    """
    suspects = set(found.slow_ranks) | {r for pair in found.slow_links for r in pair}
    per_rank: dict[int, list[float]] = {}
    for (a, b), bw in pair_gbps.items():
        per_rank.setdefault(a, []).append(bw)
        per_rank.setdefault(b, []).append(bw)
    good = sorted((r for r in ranks if r not in suspects and r in per_rank),
                  key=lambda r: -statistics.median(per_rank[r]))
    if not good or not suspects:
        return [], [], {}
    references = [(min(good[0], good[1]), max(good[0], good[1]))] if len(good) > 1 else []
    partners = {r: good[0] for r in sorted(found.slow_ranks)}
    suspect_pairs = [(min(r, p), max(r, p)) for r, p in partners.items()] + sorted(found.slow_links)
    return references + suspect_pairs + references, references, partners


def judge_confirmed(found: pairwise.Localized, samples: dict[tuple[int, int], list[float]],
                    references: list[tuple[int, int]], partners: dict[int, int], ratio: float) -> PairVerdict:
    """Keep the candidates whose pair is still slow, measured alone, against the reference.

    The reference is the known-good pair's iterations; without a second known-good rank, the
    other measured pairs' iterations stand in for it (leave one out).
    """
    verdict = PairVerdict(pairs=list(samples))

    def check(pair: tuple[int, int], first_fraction: float) -> Confirmed | None:
        mine = samples.get(pair, [])
        ref = [x for p in references for x in samples.get(p, [])] or \
              [x for p, xs in samples.items() if p != pair for x in xs]
        if not mine or not ref:
            return None
        median_ref, median_mine = statistics.median(ref), statistics.median(mine)
        p = judge.false_alarm_p(len(mine), len(ref))
        if median_ref <= 0 or median_mine >= ratio * median_ref or max(mine) >= min(ref) \
                or p > judge.MAX_FALSE_ALARM:
            return None
        return Confirmed(pair, first_fraction, median_mine / median_ref, median_mine, median_ref, p)

    for rank, first_fraction in found.slow_ranks.items():
        partner = partners.get(rank)
        if partner is None:
            continue
        kept = check((min(rank, partner), max(rank, partner)), first_fraction)
        if kept:
            verdict.slow_ranks[rank] = kept
    for pair, first_fraction in found.slow_links.items():
        kept = check(pair, first_fraction)
        if kept:
            verdict.slow_links[pair] = kept
    return verdict


def _gbps_samples(times: dict[int, list[float]], rank: int, size: int) -> dict[tuple[int, int], list[float]]:
    per_direction = pairwise.exchange_bytes(size)
    return {(min(rank, p), max(rank, p)): [per_direction / t / 1e9 for t in ts if t > 0] for p, ts in times.items()}


def lead_pairs(session: Any, found: pairwise.Localized, pair_gbps: dict[tuple[int, int], float],
               ranks: list[int], ratio: float) -> PairVerdict:
    """Rank 0: measure every candidate again, one pair at a time, and keep what stays slow."""
    pairs, references, partners = plan_pairs(found, pair_gbps, ranks)
    measured = set(pairs)
    slowest = min((bw for pair, bw in pair_gbps.items() if pair in measured and bw > 0), default=0.0)
    # One two-way exchange of the slowest pair to be measured, at the size the round robin used.
    call_s = pairwise.exchange_bytes(max(session.plan.sizes)) / (slowest * 1e9) if slowest else 0.0
    calls = calls_per_figure(call_s, session.plan.iters, session.timeout_s)
    session.board.put(CONFIRM, ConfirmPairs(pairs, calls))
    if not pairs:
        return PairVerdict()
    samples = _run_serial(session, pairs, calls)
    if samples is None:
        return PairVerdict()
    if not read_pair_samples(session, pairs, samples, time.monotonic() + session.timeout_s):
        return PairVerdict()  # a rank did not report (or sent garbage): nothing confirmed, nobody blamed
    return judge_confirmed(found, samples, references, partners, ratio)


def read_pair_samples(session: Any, pairs: list[tuple[int, int]], samples: dict[tuple[int, int], list[float]],
                      deadline: float) -> bool:
    """Rank 0: add each rank's `cpair/<rank>` samples of its own measured pairs to `samples`;
    False when a rank sent none in time or one that does not decode (set aside: session.kept)."""
    measured = set(pairs)
    for rank in sorted({r for pair in pairs for r in pair} - {0}):
        got = session.kept(session.board.wait(keys.CONFIRM_PAIR.at(rank), rank,
                                              deadline - time.monotonic()))
        if got is None:
            return False
        for a, b, xs in got.samples:
            if (a, b) in measured and rank in (a, b):  # a rank speaks for its own pairs only
                # Both ends time the same exchange; one end's figures suffice.
                samples.setdefault((a, b), [x for x in xs if x > 0])
    return True


def follow_pairs(session: Any) -> None:
    """A non-zero rank: take part in the one-pair-at-a-time pass rank 0 asks for."""
    told = session.kept(session.board.wait(CONFIRM, 0, _follow_wait_s(session)))
    if told is None:
        return
    size = session.world.world_size
    pairs = [(a, b) for a, b in told.pairs if 0 <= a < size and 0 <= b < size and a != b]
    if not pairs:
        return
    samples = _run_serial(session, pairs, told_calls(told.calls_per_figure))
    if samples is not None and any(session.world.rank in p for p in pairs):
        session.board.put(keys.CONFIRM_PAIR.at(session.world.rank),
                          PairSamples([(a, b, xs) for (a, b), xs in samples.items()]))


def _run_serial(session: Any, pairs: list[tuple[int, int]], calls: int) -> dict[tuple[int, int], list[float]] | None:
    """This rank's GB/s figures of each of its pairs, every pair alone in its own round: the plan's
    count of figures, each the mean of `calls` calls, as the groups' second pass."""
    rank, size = session.world.rank, max(session.plan.sizes)
    try:
        times = pairwise.run_rounds(rank, [], size, session.plan.iters * calls, session.control,
                                    session.timeout_s, rounds=[[tuple(p)] for p in pairs], **session.localization())
    except ABORTS as exc:
        session.gave_up(exc, "confirming")
        return None
    return _gbps_samples({peer: figures(ts, calls) for peer, ts in times.items()}, rank, size)
