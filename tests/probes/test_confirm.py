"""Confirm before blaming: which pairs the second pass measures, and what it keeps (pure functions);
and, with two real gloo ranks, what rank 0 makes of a partner stuck in the one-pair-at-a-time pass."""

from __future__ import annotations

import json
import textwrap
from pathlib import Path

import pytest

from preflight.model import ProbeResult
from preflight.probes import judge
from preflight.probes.confirm import (
    CALLS_PER_FIGURE,
    calls_per_figure,
    figures,
    judge_confirmed,
    plan_pairs,
    told_calls,
)
from preflight.probes.pairwise import judge_pairs
from tests.helpers.ranks import start_script_ranks

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


def _group(index: int, times_s: list[float]) -> ProbeResult:
    """A dp group of one all_reduce step whose timed figures are `times_s` (1 MB each)."""
    gbps = [1e6 / t / 1e9 for t in times_s]
    median = sorted(gbps)[len(gbps) // 2]
    return ProbeResult("dp", "all_reduce", 1 << 20, index, [index], [f"h{index}"], 0.0, 0.0, median,
                       iter_busbw_gbps=gbps)


def test_the_second_pass_judges_means_of_calls_so_one_stalled_call_does_not_hide_a_slow_group() -> None:
    # A shaped host's group at 21 ms a call; its healthy sibling at 3 ms, but one call stalled for 25 ms.
    shaped, healthy = [0.021] * 20, [0.003] * 20
    healthy[6] = 0.025
    one_each = judge.stragglers([_group(0, healthy), _group(1, shaped)], 0.8)
    assert one_each == []  # every call must separate: the stalled one does not
    means = [_group(0, figures(healthy, CALLS_PER_FIGURE)), _group(1, figures(shaped, CALLS_PER_FIGURE))]
    assert [s.group_index for s in judge.stragglers(means, 0.8)] == [1]
    assert figures(healthy, 4)[1] == pytest.approx((0.003 * 3 + 0.025) / 4) and len(figures(healthy, 4)) == 5
    assert figures([1.0, 2.0, 3.0], 2) == [1.5, 3.0]  # a last, shorter run is its own mean


def test_fewer_calls_a_figure_where_four_would_overrun_the_steps_deadline() -> None:
    # 5 figures of 4 calls of 20 ms: 0.4 s of a 30 s deadline.
    assert calls_per_figure(0.02, 5, 30.0) == CALLS_PER_FIGURE == 4
    # A degraded link at a large size: 20 figures of 0.3 s calls; four a figure would take 24 s of 30.
    assert calls_per_figure(0.3, 20, 30.0) == 2
    assert calls_per_figure(0.5, 20, 30.0) == 1  # already half the deadline: the first pass's own count
    assert calls_per_figure(0.0, 5, 30.0) == CALLS_PER_FIGURE  # nothing known: the default
    # A follower takes rank 0's count bounded: a peer's value never asks for more, nor for none.
    assert [told_calls(n) for n in (-3, 0, 1, 3, 4, 1 << 40)] == [1, 1, 1, 3, 4, 4]


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


# Rank 0 confirms the pair (0, 1) on a real Session; rank 1 passes the round's barrier, then never
# exchanges (a wedged NIC driver): it stays alive, beating, inside the pass for good.
STUCK_PARTNER = textwrap.dedent("""
    import json, os, sys, time
    from datetime import timedelta
    import torch, torch.distributed as dist
    from preflight.lib.mesh_shape import MeshDim
    from preflight.model import World
    from preflight.probes import confirm
    from preflight.probes.plan import ProbePlan
    from preflight.probes.session import Session
    from preflight.probes.timing import barrier
    rank, store_path = int(sys.argv[1]), sys.argv[2]
    dist.init_process_group("gloo", store=dist.FileStore(store_path, 2), rank=rank, world_size=2,
                            timeout=timedelta(seconds=60))
    control = dist.new_group(backend="gloo")
    if rank == 1:
        barrier(control, time.monotonic() + 60)
        time.sleep(3600)
    plan = ProbePlan([MeshDim("world", 2)], ["all_reduce"], [4096], warmup=1, iters=3, world_all_reduce=False)
    session = Session(World("env", 0, 2), plan, None, torch.device("cpu"), torch.float32, control, {}, 2.0,
                      world_group=dist.group.WORLD)
    samples = confirm._run_serial(session, [(0, 1)], confirm.CALLS_PER_FIGURE)
    print(json.dumps({"samples": samples, "abandoned": session.abandoned, "stuck_with": session.stuck_with}),
          flush=True)
    os._exit(0)  # the abandoned exchange's groups are never torn down (session.abandoned)
""")


def test_a_partner_stuck_in_the_confirming_pass_is_marked_by_rank_0(tmp_path: Path) -> None:
    """Rank 0 gives up on the pass after --probe-timeout and marks the rank it was stuck with, as the
    round robin does: the verdict's hand-off then does not wait the 30 s cap for it (orchestrate.py)."""
    procs = start_script_ranks(STUCK_PARTNER, 2, tmp_path / "store")
    try:
        out, err = procs[0].communicate(timeout=120)
    finally:
        procs[1].kill()
        procs[1].communicate()
    assert procs[0].returncode == 0, err[-1500:]
    got = json.loads(out.strip().splitlines()[-1])
    assert got == {"samples": None, "abandoned": True,
                   "stuck_with": {"1": "its confirming exchange with rank 0 did not complete"}}, got
