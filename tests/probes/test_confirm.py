"""Confirm before blaming: which pairs the second pass measures, and what it keeps (pure functions)."""

from __future__ import annotations

from preflight.probes.confirm import judge_confirmed, plan_pairs
from preflight.probes.pairwise import judge_pairs

FAST = [10.0, 10.2, 9.9, 10.1, 9.8]


def _pairs(slow_rank: int | None = None, slow_link: tuple[int, int] | None = None) -> dict[tuple[int, int], float]:
    pairs = {}
    for a in range(4):
        for b in range(a + 1, 4):
            bw = 10.0
            if slow_rank in (a, b) or (a, b) == slow_link:
                bw = 1.0
            pairs[(a, b)] = bw + 0.1 * (a + b)  # distinct, so the fastest known-good rank is well defined
    return pairs


def test_a_suspect_rank_is_measured_against_the_fastest_known_good_rank_between_references() -> None:
    pair_gbps = _pairs(slow_rank=3)
    found = judge_pairs(pair_gbps, 0.8)
    pairs, references, partners = plan_pairs(found, pair_gbps, [0, 1, 2, 3])
    assert list(found.slow_ranks) == [3]
    assert partners == {3: 2} and references == [(0, 2)]
    assert pairs == [(0, 2), (2, 3), (0, 2)]


def test_what_stays_slow_is_kept_with_both_measurements() -> None:
    pair_gbps = _pairs(slow_rank=3)
    found = judge_pairs(pair_gbps, 0.8)
    _, references, partners = plan_pairs(found, pair_gbps, [0, 1, 2, 3])
    samples = {(0, 2): FAST + FAST, (2, 3): [1.0, 1.1, 0.9, 1.2, 1.0]}
    verdict = judge_confirmed(found, samples, references, partners, 0.8)
    kept = verdict.slow_ranks[3]
    assert kept.pair == (2, 3) and kept.first_fraction == found.slow_ranks[3]
    assert round(kept.fraction, 2) == 0.1 and kept.false_alarm_p == 1 / 3003


def test_a_candidate_that_is_fast_when_measured_alone_is_dropped() -> None:
    pair_gbps = _pairs(slow_link=(1, 3))
    found = judge_pairs(pair_gbps, 0.8)
    assert list(found.slow_links) == [(1, 3)]
    pairs, references, partners = plan_pairs(found, pair_gbps, [0, 1, 2, 3])
    assert pairs == [(0, 2), (1, 3), (0, 2)]  # the link itself, between two known-good references
    noise = judge_confirmed(found, {(0, 2): FAST + FAST, (1, 3): [9.0, 9.5, 10.0, 8.0, 9.1]}, references,
                            partners, 0.8)
    assert noise.slow_links == {}
    # Slow on median but one iteration as fast as the reference: the spread explains it.
    overlap = judge_confirmed(found, {(0, 2): FAST + FAST, (1, 3): [2.0, 2.0, 2.0, 2.0, 9.9]}, references,
                              partners, 0.8)
    assert overlap.slow_links == {}


def test_without_a_known_good_rank_nothing_is_measured_or_named() -> None:
    found = judge_pairs({(0, 1): 1.0, (0, 2): 10.0, (1, 2): 10.0}, 0.8)
    assert plan_pairs(found, {(0, 1): 1.0}, [0, 1]) == ([], [], {})
