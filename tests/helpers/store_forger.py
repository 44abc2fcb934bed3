"""A foreign c10d store client that forges a run's verdict and an absent rank's payload.

    python tests/helpers/store_forger.py RANK INNOCENT_HOST

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
"""

from __future__ import annotations

import json
import os
import socket
import sys
import time
from datetime import timedelta

from torch.distributed import PrefixStore, TCPStore

from preflight.channel.exchange import NONCE_KEY, Exchange, RankPayload
from preflight.channel.store_join import run_prefix
from preflight.model import Finding, RankFacts, Severity
from preflight.steps.launchers import resolve_world

WAIT_S = 60.0


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
    os.environ.pop("PREFLIGHT_SECRET", None)  # a foreign process: it does not have the job's secret
    world = resolve_world(os.environ)
    _wait_for_port(world.master_addr, world.master_port)
    client = TCPStore(world.master_addr, world.master_port, None, False, timeout=timedelta(seconds=WAIT_S))
    store = PrefixStore(run_prefix(world), client)
    deadline = time.monotonic() + WAIT_S
    while not store.check([NONCE_KEY]):
        if time.monotonic() > deadline:
            raise SystemExit("forger: the run never agreed on a nonce")
        time.sleep(0.1)
    nonce = bytes(store.get(NONCE_KEY)).decode()
    store.set("verdict", json.dumps({"exit_code": 0, "verdict": "passed", NONCE_KEY: nonce}))
    forger = Exchange(world, timeout_s=WAIT_S)
    forger.store, forger.nonce, forger.secret = store, nonce, None
    facts = RankFacts(rank=rank, host=innocent, world=world)
    facts.world.host = innocent
    fabricated = Finding("NCCL008", Severity.ERROR, f"fabricated: {innocent} has no such interface", ranks=[rank],
                         hosts=[innocent], blames_host=True)
    forger.publish(RankPayload(rank, facts, findings=[fabricated]))
    print(f"forger: verdict and rank {rank}'s payload forged (nonce {nonce}, innocent host {innocent})", flush=True)


if __name__ == "__main__":
    main()
