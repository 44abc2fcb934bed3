"""The reachability pairing plan: bounded fan-out, every host probed, the same on every host."""

from __future__ import annotations

from collections import Counter

import pytest

from preflight.steps.tcp_reach import RANDOM_PEERS, plan_probes, targets_of


def test_plan_for_4096_hosts_is_linear_and_probes_every_host() -> None:
    count, k = 4096, RANDOM_PEERS
    plan = plan_probes(count, k, seed="slurm-123.0")
    connections = sum(len(t) for t in plan)
    assert connections <= count * (k + 2)  # O(N*k), not N^2 (16.7 M)
    assert connections >= count * 2
    probed = Counter(t for targets in plan for t in targets)
    assert set(probed) == set(range(count))  # every host is probed ...
    assert min(probed.values()) >= 2  # ... by at least its two ring neighbours
    for index, targets in enumerate(plan):
        assert index not in targets and len(set(targets)) == len(targets)


def test_plan_is_deterministic_per_seed_and_computable_per_host() -> None:
    plan = plan_probes(64, 3, seed="run-a")
    assert plan == plan_probes(64, 3, seed="run-a")
    assert plan != plan_probes(64, 3, seed="run-b")
    assert all(targets_of(i, 64, 3, "run-a") == plan[i] for i in range(64))


@pytest.mark.parametrize("count", [1, 2, 3, 4, 5])
def test_small_worlds(count: int) -> None:
    plan = plan_probes(count, 2, seed="s")
    for index, targets in enumerate(plan):
        assert sorted(targets) == sorted(set(range(count)) - {index})
