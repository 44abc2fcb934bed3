"""Adaptive group testing: k bad hosts among N named in O(k log N) tests, noise not blamed."""

from __future__ import annotations

import math

import pytest

from preflight.probes.grouptest import locate


def _tester(bad: set[int], flips: list[int] | None = None):
    """A pool is slow when it holds a bad host; `flips` lists test numbers whose answer comes out wrong."""
    count = {"n": 0}

    def test(pools: list[list[int]]) -> list[bool]:
        out = []
        for pool in pools:
            count["n"] += 1
            truth = bool(bad & set(pool))
            out.append(not truth if flips and count["n"] in flips else truth)
        return out

    return test


@pytest.mark.parametrize(("n", "bad"), [(64, {5}), (512, {0, 300}), (4096, {1, 2, 2000, 4095})])
def test_k_bad_among_n_are_named_in_order_k_log_n_tests(n: int, bad: set[int]) -> None:
    found = locate(list(range(n)), 4, _tester(bad))
    assert found.bad == sorted(bad)
    assert found.cleared == n - len(bad)
    assert found.tests <= 2 * len(bad) * math.ceil(math.log2(n)) + len(bad)  # both halves, plus confirmations
    assert found.rounds < n - 1  # the round robin's cost


def test_one_known_good_host_serialises_the_pools() -> None:
    found = locate(list(range(16)), 1, _tester({3}))
    assert found.bad == [3] and found.rounds == found.tests
    assert all(len(r) == 1 for r in found.history)


def test_a_host_slow_once_is_confirmed_before_it_is_named() -> None:
    # Test 1 (the first half, hosts 0-7) comes out slow by noise: the split reaches a single
    # host, whose confirmation clears it; the real bad host is still named.
    found = locate(list(range(16)), 2, _tester({12}, flips=[1]))
    assert found.bad == [12]


def test_a_slow_pool_hidden_by_noise_is_measured_again() -> None:
    # Tests 1 and 2 (both halves of the known-slow suspects) come out fast: the whole is retested.
    found = locate(list(range(8)), 2, _tester({6}, flips=[2]))
    assert found.bad == [6]
    assert (8, True) in found.history[1]  # the retest of the whole pool


def test_without_a_known_good_host_it_refuses() -> None:
    with pytest.raises(ValueError):
        locate([1, 2], 0, _tester({1}))
