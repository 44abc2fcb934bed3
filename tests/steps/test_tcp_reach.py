"""The reachability pairing plan: bounded fan-out, every host probed, the same on every host."""

from __future__ import annotations

import json
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


class CountingStore:
    """A real TCPStore, with its calls counted."""

    def __init__(self, store) -> None:
        self.store, self.calls = store, 0

    def __getattr__(self, name):
        method = getattr(self.store, name)

        def counted(*args, **kwargs):
            self.calls += 1
            return method(*args, **kwargs)
        return counted


def test_rank_0_reads_every_hosts_key_in_two_calls_per_chunk_not_two_per_host() -> None:
    from datetime import timedelta

    from torch.distributed import TCPStore

    from preflight.channel.board import FETCH_CHUNK, Board
    from preflight.channel.keys import REACH_LISTENER
    from preflight.steps.tcp_reach import fetch_typed

    server = TCPStore("127.0.0.1", 0, None, True, timedelta(seconds=10), wait_for_workers=False)
    keys = [REACH_LISTENER.at(f"h{i}") for i in range(FETCH_CHUNK + 10)]
    for i, key in enumerate(keys):
        server.set(key, json.dumps({"host": f"h{i}"}))
    store = CountingStore(server)
    found = fetch_typed(Board(store), keys)
    assert len(found) == len(keys) and found[keys[-1]]["host"] == f"h{len(keys) - 1}"
    assert store.calls == 4  # a check and a multi_get per chunk of 1,024
    store.calls = 0
    missing = [*keys[:5], REACH_LISTENER.at("absent")]
    assert fetch_typed(Board(store), missing) == {} and store.calls == 1  # incomplete: waits, unread
    assert set(fetch_typed(Board(store), missing, final=True)) == set(keys[:5])  # at the deadline


def test_a_foreign_value_under_the_hosts_claim_counter_leaves_the_step_inert_not_raising() -> None:
    """c10d's server answers an add on a non-integer value by closing the connection: a foreign
    client's `[1]` under `reach/claim/<host>` must not be a traceback on the rank that claims."""
    from datetime import timedelta

    from torch.distributed import TCPStore

    from preflight.channel.keys import REACH_CLAIM
    from preflight.model import RankFacts, World
    from preflight.steps.tcp_reach import Reachability

    server = TCPStore("127.0.0.1", 0, None, True, timedelta(seconds=10), wait_for_workers=False)
    client = TCPStore("127.0.0.1", server.port, None, False, timedelta(seconds=10))
    server.set(REACH_CLAIM.at("node1"), "[1]")
    # c10d's set gets no answer: one round trip on the same connection makes sure the server applied
    # it before the rank's add arrives on its own connection (under load the add once came first,
    # found no key, and counted 1).
    assert server.check([REACH_CLAIM.at("node1")])
    reach = Reachability(client, RankFacts(rank=1, host="node1", world=World(launcher="env", rank=1, world_size=2)),
                         "seed", 1.0)
    reach.start()
    reach.probe_peers(0.1)
    reach.finish(0.1)
    assert not reach.active and reach.store is None
