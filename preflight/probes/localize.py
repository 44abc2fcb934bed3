"""Localization on rank 0 and its followers: which ranks, hosts or links make the slow groups slow.

After the straggler judgment and its confirming pass (confirm.py), rank 0 decides how to
localize (hosttest.choose): a pairwise round robin over the slow groups' ranks (pairwise.py),
each suspect then measured again alone against a known-good partner (confirm.py), and/or
adaptive group testing among hosts over sub-communicators (hosttest.py). It publishes the
decision under `localize`, so every follower takes part in the same rounds, and reports what
was found plus one summary (BW013) with the rounds and seconds spent. A step that gives up on
a collective marks the session abandoned (the groups are then never torn down).
"""

from __future__ import annotations

import statistics
import time
from typing import Any

from preflight.channel import keys
from preflight.checks.localization_findings import localization_summary, slow_host, slow_host_group_tested, slow_link
from preflight.model import Finding, ProbeResult
from preflight.model.messages import ConfirmPairs, LocalizePlan, PairTimes
from preflight.options import RunOptions
from preflight.probes import timing

MAX_LOCALIZE_RANKS = 64  # n-1 rounds each: keep the round robin short on big jobs


def lead(session: Any, slow: list[Any], results: list[ProbeResult], hosts: dict[int, str],
         options: RunOptions) -> list[Finding]:
    """Rank 0: publish how the confirmed slow groups (`slow`, [] for none or after a hang) are
    localized, run it, and return its findings."""
    from preflight.probes import hosttest

    ranks = localization_set(slow, results)
    sets = hosttest.host_sets({r for s in slow for r in s.ranks}, hosts, session.world.world_size) if slow else None
    method = hosttest.choose(sets, len(ranks), options.probes.localize) if sets else "pairwise"
    group_test = sets is not None and hosttest.possible(sets) and options.probes.localize != "pairwise"
    # Followers learn what follows: the round robin over these ranks, and whether group testing may.
    session.board.put(keys.LOCALIZE.key, LocalizePlan(ranks if method == "pairwise" else [], group_test))
    if sets is None or not (ranks or group_test):
        return []
    from preflight.probes.judge import cross_dim_suspects

    return _run(session, ranks if method == "pairwise" else [], sets, hosts, options.probes.straggler_ratio, group_test,
                slow_ranks=sorted(cross_dim_suspects(slow)))


def localization_set(slow: list[Any], results: list[ProbeResult]) -> list[int]:
    """The slow groups' ranks plus the fastest healthy sibling of each, as a reference."""
    chosen: set[int] = set()
    for s in slow:
        chosen |= set(s.ranks)
        siblings = [r for r in results if r.dim == s.dim and r.op == s.op and r.size_bytes == s.size_bytes
                    and r.group_index != s.group_index and not set(r.ranks) & set(s.ranks)]
        if siblings:
            chosen |= set(max(siblings, key=lambda r: r.busbw_gbps).ranks)
    return sorted(chosen)[:MAX_LOCALIZE_RANKS]


def _run(session: Any, ranks: list[int], sets: Any, hosts: dict[int, str], ratio: float,
         group_test: bool, slow_ranks: list[int] | None = None) -> list[Finding]:
    """Rank 0: the round robin over `ranks` (when given), then group testing among hosts when it may
    run and the round robin was skipped or named nothing (hosttest.choose); then a summary (BW013)."""
    from preflight.probes import hosttest

    began, abandoned_before = time.monotonic(), session.abandoned
    findings: list[Finding] = []
    rounds = tests = 0
    method = "pairwise" if ranks else "grouptest"
    extra: dict[str, object] = {}
    if ranks:
        good_ranks = {r for h in sets.good for r in sets.ranks[h]}
        findings, rounds, tests, trusted = _round_robin(session, ranks, hosts, ratio, good_ranks)
        extra.update(round_robin_rounds=rounds, round_robin_trusted=trusted)
    if group_test and not findings:
        found = hosttest.lead(session, sets, ratio)
        method = "pairwise, then grouptest" if ranks else "grouptest"
        if found is not None:
            rounds, tests = rounds + found.rounds, tests + found.tests
            extra.update(grouptest_rounds=found.rounds, grouptest_seconds=round(found.seconds, 3))
            for v in found.named:
                findings += slow_host_group_tested.report(
                    host=v.host, ranks=v.ranks, fractions=v.fractions, partners=v.partners,
                    reference_gbps=found.reference_gbps, rounds=found.rounds, seconds=found.seconds)
    elif group_test:
        hosttest.skip(session)
    named = sorted({h for f in findings for h in f.hosts if h})
    unfinished = f"{method}: a collective did not complete within --probe-timeout, or failed" \
        if session.abandoned and not abandoned_before else ""
    if unfinished:  # who it was stuck with, and any rank the liveness owner knows dead
        dead = timing.abort_check() if timing.abort_check is not None else ""
        unfinished += "".join(f" ({why})" for why in (session.stopped_why, dead) if why)
    return findings + localization_summary.report(
        method=method, suspects=sets.suspects, good=sets.good, rounds=rounds, tests=tests,
        seconds=time.monotonic() - began, named=named, extra=extra, unfinished=unfinished, slow_ranks=slow_ranks)


def _round_robin(session: Any, ranks: list[int], hosts: dict[int, str], ratio: float,
                 good_ranks: set[int]) -> tuple[list[Finding], int, int, bool]:
    """Rank 0's part of the round robin, then the verdict on hosts and links:
    (findings, rounds, tests, whether its yardstick could be trusted: hosttest.round_robin_trusted)."""
    from preflight.probes import confirm, hosttest, pairwise
    from preflight.probes.timing import ProbeFailed, ProbeTimeout

    size = max(session.plan.sizes)
    schedule = pairwise.round_robin(ranks)
    rounds, tests = len(schedule), sum(len(pairs) for pairs in schedule)
    try:
        mine = pairwise.run_rounds(0, ranks, size, session.plan.iters, session.control, session.timeout_s,
                                   **session.localization())
    except (ProbeTimeout, ProbeFailed, RuntimeError) as exc:
        session.gave_up(exc, "localization")
        session.stopped_why = f"rank 0: {str(exc)[:200]}"
        session.board.put(confirm.CONFIRM, ConfirmPairs([]))  # nothing to confirm: release the others
        return [], rounds, tests, True
    session.board.put(keys.PAIR.at(0), PairTimes(dict(mine)))
    times = read_pair_times(session, ranks, time.monotonic() + session.timeout_s)
    per_direction = pairwise.exchange_bytes(size)
    pair_gbps = {pair: per_direction / t / 1e9 for pair, t in times.items() if t > 0}
    found = pairwise.judge_pairs(pair_gbps, ratio)
    trusted = hosttest.round_robin_trusted(pair_gbps, good_ranks, ratio)
    if not trusted:  # its yardstick is slow: nothing it says is confirmed or reported; group testing decides
        found = pairwise.Localized({}, {}, found.median_gbps)
    # Candidates only: each is measured again alone against a known-good partner (confirm.py).
    kept = confirm.lead_pairs(session, found, pair_gbps, ranks, ratio)
    findings = []
    for rank, c in kept.slow_ranks.items():
        partner = c.pair[0] if c.pair[1] == rank else c.pair[1]
        findings += slow_host.report(rank=rank, host=hosts.get(rank, ""), confirmed=c, partner=partner,
                                     partner_host=hosts.get(partner, ""), median_gbps=found.median_gbps)
    for (a, b), c in kept.slow_links.items():
        findings += slow_link.report(ranks=[a, b], hosts=[hosts.get(a, ""), hosts.get(b, "")], confirmed=c)
    return findings, rounds + len(kept.pairs), tests + len(kept.pairs), trusted


def read_pair_times(session: Any, ranks: list[int], deadline: float) -> dict[tuple[int, int], float]:
    """Rank 0: each pair's median seconds from the ranks' `pair/<rank>` (the slower end's); a rank
    that sent none in time is left out, one whose value does not decode is set aside (session.kept)."""
    times: dict[tuple[int, int], float] = {}
    among = set(ranks)
    for rank in ranks:
        got = session.kept(session.board.wait(keys.PAIR.at(rank), rank, deadline - time.monotonic()))
        if got is None:
            continue
        for peer, seconds in got.times.items():
            if peer not in among or peer == rank or not seconds:  # only pairs of this round robin
                continue
            key = (min(rank, peer), max(rank, peer))
            times[key] = max(times.get(key, 0.0), statistics.median(seconds))
    return times


def follow(session: Any, status: Any) -> None:
    """A non-zero rank: measure again, then take part in the round robin and its confirmation, and in
    group testing, when asked."""
    from preflight.probes import confirm, hosttest

    if status.state != "done":
        return  # a hang: rank 0 will not ask; nothing more goes through the communicators
    if not confirm.follow_groups(session):
        return
    told = session.kept(session.board.wait(keys.LOCALIZE.key, 0, 2 * session.timeout_s + 10))
    if told is None:
        return
    ranks = sorted({r for r in told.ranks if 0 <= r < session.world.world_size})
    if ranks and _follow_round_robin(session, ranks):
        confirm.follow_pairs(session)
    if told.hosts:
        hosttest.follow(session)  # rank 0 says done at once when the round robin named someone


def _follow_round_robin(session: Any, ranks: list[int]) -> bool:
    """A non-zero rank's part of the round robin; False when it broke off."""
    from preflight.probes import pairwise
    from preflight.probes.timing import ProbeFailed, ProbeTimeout

    rank = session.world.rank
    try:
        mine = pairwise.run_rounds(rank, ranks, max(session.plan.sizes), session.plan.iters, session.control,
                                   session.timeout_s, **session.localization())
    except (ProbeTimeout, ProbeFailed, RuntimeError) as exc:
        session.gave_up(exc, "localization")
        return False
    if rank in ranks:
        session.board.put(keys.PAIR.at(rank), PairTimes(dict(mine)))
    return True
