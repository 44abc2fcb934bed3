"""Joining rank 0's store: a store that is slow to open its port and slow to answer is slow, not foreign.

A real c10d store (the server in this process) behind a plain TCP relay that opens its port late
and forwards each connection only after a delay: the follower's wait for the port and the store's
handshake are then both real waits on real sockets.
"""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import timedelta

import pytest

from preflight.channel.store_join import ForeignStore, join_store, mark_store
from preflight.model import World
from preflight.steps.launchers import resolve_world
from tests.helpers.ranks import free_port


def _pipe(source: socket.socket, sink: socket.socket) -> None:
    try:
        while data := source.recv(65536):
            sink.sendall(data)
    except OSError:
        pass
    finally:
        sink.close()


@contextmanager
def late_relay(target_port: int, opens_after_s: float, answers_after_s: float) -> Iterator[int]:
    """A port that starts listening after `opens_after_s` and relays each connection to
    127.0.0.1:target_port once `answers_after_s` have passed (nothing reaches the store before)."""
    port, stop = free_port(), threading.Event()

    def relay(client: socket.socket) -> None:
        time.sleep(answers_after_s)
        upstream = socket.create_connection(("127.0.0.1", target_port))
        for a, b in ((client, upstream), (upstream, client)):
            threading.Thread(target=_pipe, args=(a, b), daemon=True).start()

    def serve() -> None:
        time.sleep(opens_after_s)
        with socket.create_server(("127.0.0.1", port)) as listener:
            listener.settimeout(0.1)
            while not stop.is_set():
                try:
                    client, _ = listener.accept()
                except TimeoutError:
                    continue
                threading.Thread(target=relay, args=(client,), daemon=True).start()

    server = threading.Thread(target=serve, daemon=True)
    server.start()
    try:
        yield port
    finally:
        stop.set()
        server.join(5)


def _world(port: int) -> World:
    return resolve_world({"RANK": "1", "WORLD_SIZE": "2", "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port),
                          "PREFLIGHT_RUN_ID": "join-test"})


def test_a_store_whose_port_opened_late_still_gets_its_whole_handshake() -> None:
    """The port opens 1.6 s into a 2 s join and the store answers 1.5 s later: joined, not called foreign
    (the handshake was cut to what was left of the 2 s, 1 s, and the store was named another program's)."""
    from torch.distributed import TCPStore

    server = TCPStore("127.0.0.1", 0, None, True, timedelta(seconds=30), wait_for_workers=False)
    with late_relay(server.port, opens_after_s=1.6, answers_after_s=1.5) as port:
        world = _world(port)
        mark_store(server, world)
        store = join_store(world, timeout_s=2.0)
    store.set("joined", b"yes")
    assert bytes(server.get("joined")) == b"yes"


def test_a_store_slowed_by_one_resolver_timeout_is_joined_not_called_foreign() -> None:
    """A store that answers 5.5 s after the connection (a c10d store waiting on its client's reverse lookup:
    glibc's resolver timeout is 5 s; 24 joins at once in the lab, most answered at 5.01 s) is joined, not
    named another program's, with a short --timeout (a 5 s handshake called it PORT004)."""
    from torch.distributed import TCPStore

    server = TCPStore("127.0.0.1", 0, None, True, timedelta(seconds=30), wait_for_workers=False)
    with late_relay(server.port, opens_after_s=0.0, answers_after_s=5.5) as port:
        world = _world(port)
        mark_store(server, world)
        store = join_store(world, timeout_s=3.0)
    assert store.check(["preflight/owner"])


def test_a_listener_that_never_answers_is_foreign_after_the_least_handshake() -> None:
    """The other side of the same bound: a port that accepts and never answers as a store is refused once
    the least handshake has passed, however short the join's own deadline."""
    before = set(threading.enumerate())
    with socket.create_server(("127.0.0.1", 0)) as mute:
        world = _world(mute.getsockname()[1])
        started = time.monotonic()
        with pytest.raises(ForeignStore, match="did not answer as a c10d store within 1s"):
            join_store(world, timeout_s=0.5, least_handshake_s=1.0)
        assert time.monotonic() - started >= 1.0
    # The client given up on still waits in c10d's handshake; the listener's close resets it. Its c10d error and
    # stack are this test's output (captured) only if it ends before the test does: they went to the suite's own.
    for thread in set(threading.enumerate()) - before:
        thread.join(30)
