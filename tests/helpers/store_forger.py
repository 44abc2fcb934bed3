"""A foreign c10d store client that forges a run's verdict and an absent rank's payload.

    python tests/helpers/store_forger.py RANK INNOCENT_HOST [SHAPE]

Run by a test in place of rank RANK (its launcher's variables in the environment, so it
knows the run's store address, port and key prefix, as anyone on the network can learn
them), but WITHOUT the run's secret: the attack a store open to the network allows. It
joins the store as a plain TCPStore client once MASTER_PORT accepts, reads the run's nonce
(any connected client can), then:

- sets `verdict` to exit 0 ("passed"), with the nonce, before rank 0 decides: a rank that
  adopted it would end the job as passed;
- publishes a payload for rank RANK, which never reports itself: its facts claim the
  innocent host and hold an error finding naming it (NCCL008), which would put that host on
  the exclude list.

With a run secret (PREFLIGHT_SECRET in every real rank) both are refused: the payload is
RUN002, the verdict ignored (preflight/channel/run_auth.py). Writes what it did to stdout.

With SHAPE (one of BAD_VALUES: `[1]`, `{}`, `"x"`, a 10 MB string) it forges no payload: once
rank 1 has claimed its rank, it writes that value of the wrong type under the run's `go` and
`verdict` and over the store's owner mark, then exits. Every rank must refuse it as a bad value
(RUN010) and still exit with a true code.

With FORGER_READY set (a path), it creates that file once its imports are done, before it
looks for the store: a test can hold rank 0 back until then, so that rank 0's --timeout
starts counting when the forger is ready to act, not while it is still importing torch.
"""

from __future__ import annotations

import json
import os
import socket
import sys
import time
from datetime import timedelta

from torch.distributed import PrefixStore, TCPStore

from preflight.channel import keys
from preflight.channel.exchange import Exchange, RankPayload
from preflight.channel.store_join import run_prefix
from preflight.model import Finding, RankFacts, Severity
from preflight.steps.launchers import resolve_world

WAIT_S = 60.0
BAD_VALUES = {"list": b"[1]", "dict": b"{}", "str": b'"x"', "10MB": json.dumps("x" * 10 * 2**20).encode()}
STORE_MAX_VALUE = 8 * 2**20  # the largest value a c10d TCPStore server takes (torch 2.13, measured)


def _wait_for_port(host: str, port: int) -> None:
    """A c10d client that reaches no store waits forever: wait for the port to accept first."""
    deadline = time.monotonic() + WAIT_S
    while time.monotonic() < deadline:
        try:
            socket.create_connection((host, port), timeout=1).close()
            return
        except OSError:
            time.sleep(0.2)
    raise SystemExit(f"forger: {host}:{port} never accepted")


def main() -> None:
    rank, innocent = int(sys.argv[1]), sys.argv[2]
    if os.environ.get("FORGER_READY"):
        open(os.environ["FORGER_READY"], "w").close()
    os.environ.pop("PREFLIGHT_SECRET", None)  # a foreign process: it does not have the job's secret
    world = resolve_world(os.environ)
    _wait_for_port(world.master_addr, world.master_port)
    client = TCPStore(world.master_addr, world.master_port, None, False, timeout=timedelta(seconds=WAIT_S))
    store = PrefixStore(run_prefix(world), client)
    deadline = time.monotonic() + WAIT_S
    while not store.check([keys.NONCE.key]):
        if time.monotonic() > deadline:
            raise SystemExit("forger: the run never agreed on a nonce")
        time.sleep(0.1)
    nonce = bytes(store.get(keys.NONCE.key)).decode()
    if len(sys.argv) > 3:
        forge_bad_values(client, store, world.world_size, sys.argv[3], deadline, run_prefix(world))
        return
    store.set(keys.VERDICT.key, json.dumps({"exit_code": 0, "verdict": "passed", "nonce": nonce}))
    forger = Exchange(world, timeout_s=WAIT_S)
    forger.store, forger.nonce, forger.secret = store, nonce, None
    facts = RankFacts(rank=rank, host=innocent, world=world)
    facts.world.host = innocent
    fabricated = Finding("NCCL008", Severity.ERROR, f"fabricated: {innocent} has no such interface", ranks=[rank],
                         hosts=[innocent], blames_host=True)
    forger.publish(RankPayload(rank, facts, findings=[fabricated]))
    print(f"forger: verdict and rank {rank}'s payload forged (nonce {nonce}, innocent host {innocent})", flush=True)


def forge_bad_values(client: TCPStore, store: PrefixStore, world_size: int, shape: str, deadline: float,
                     prefix: str) -> None:
    """Once rank 1 has claimed its rank: a value of the wrong type under go, verdict and the owner mark.

    A value over 8 MiB never gets in: the c10d store (torch 2.13's libuv server) drops the
    connection of a client that sends one. Then the forger connects again and writes the largest
    value the store takes, an 8 MiB JSON string, instead."""
    while 1 not in keys.listed_ranks(store, keys.CLAIMED.key, world_size):
        if time.monotonic() > deadline:
            raise SystemExit("forger: rank 1 never claimed its rank")
        time.sleep(0.1)
    value = BAD_VALUES[shape]
    try:
        store.set(keys.GO.key, value)
    except RuntimeError as exc:  # DistNetworkError: the store refused the value and dropped us
        print(f"forger: the store refused {len(value)} bytes ({str(exc).splitlines()[0][:80]})", flush=True)
        client = TCPStore(client.host, client.port, None, False, timeout=timedelta(seconds=WAIT_S))
        store = PrefixStore(prefix, client)
        value = json.dumps("x" * (STORE_MAX_VALUE - 2)).encode()
        store.set(keys.GO.key, value)
    store.set(keys.VERDICT.key, value)
    client.set(keys.OWNER.key, value)  # the owner mark sits at the store's root, beside the run's prefix
    print(f"forger: wrote {shape} ({len(value)} bytes) under go, verdict and the owner mark", flush=True)


if __name__ == "__main__":
    main()
