"""A probe wait ends as soon as a peer is known dead, not at --probe-timeout (probes/liveness.py, timing.py).

Real gloo process groups, two ranks in one process (threads), on a real TCPStore.
"""

from __future__ import annotations

import threading
import time
from datetime import timedelta

import pytest
import torch
import torch.distributed as dist
from torch.distributed import PrefixStore, TCPStore

from preflight.probes import timing


@pytest.fixture
def two_gloo_ranks():
    server = TCPStore("127.0.0.1", 0, None, True, timedelta(seconds=30), wait_for_workers=False)
    groups = {}

    def make(rank: int) -> None:
        # A client each: one c10d client serializes its calls, so two ranks on one would deadlock.
        client = TCPStore("127.0.0.1", server.port, None, False, timedelta(seconds=30))
        groups[rank] = dist.ProcessGroupGloo(PrefixStore("pg", client), rank, 2, timedelta(seconds=60))

    threads = [threading.Thread(target=make, args=(rank,)) for rank in (0, 1)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    yield groups
    timing.abort_check = None


def test_a_collective_waiting_on_a_dead_peer_ends_with_peer_died_not_the_deadline(two_gloo_ranks) -> None:
    work = two_gloo_ranks[0].allreduce([torch.ones(4)])  # rank 1 never joins: it "died"
    timing.abort_check = lambda: "rank 1 is dead: no heartbeat"
    with pytest.raises(timing.PeerDied, match="rank 1 is dead"):
        timing.wait_works([work], time.monotonic() + 300)  # the deadline would be ProbeTimeout, 300 s on
    two_gloo_ranks[1].allreduce([torch.ones(4)]).wait()  # let the pending op finish: a clean teardown
    work.wait()


def test_a_long_wait_with_every_peer_alive_goes_on_past_a_slice(two_gloo_ranks) -> None:
    timing.abort_check = lambda: ""
    work = two_gloo_ranks[0].allreduce([torch.ones(4)])
    late = threading.Timer(timing.SLICE_S * 1.5, lambda: two_gloo_ranks[1].allreduce([torch.ones(4)]).wait())
    late.start()
    timing.wait_works([work], time.monotonic() + 300)  # returns once rank 1 joins, after more than one slice
    late.join()
