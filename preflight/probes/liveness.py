"""A rank that dies during the probes is named as dead, without waiting out --probe-timeout.

A collective with a dead member can never finish: on NCCL it hangs until the deadline, and on
any backend the process group's creation waits in the store for a rank that will never come.
So every rank beats under its own key for as long as it is alive (from its claim in the store
until it leaves: channel/liveness.RankLiveness, the one owner of "is that rank alive?") and
rank 0 watches the beats from the collect on (`watching` adds the probes' whole world). Once a
rank has been silent for stall_s(N), or said it left, rank 0 publishes it under DEAD_KEY; every
rank's long waits (timing.wait_works between slices, and `bounded` around the process group's
creation) read that key and end at once. Rank 0 names the dead rank: BW002 when it died
inside a measured step, RUN008 when the probes could not start without it.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any, TypeVar

from msgspec import Struct

from preflight.channel import keys, store_join
from preflight.channel.liveness import RankLiveness
from preflight.lib import deadline
from preflight.lib.waiting import join_until
from preflight.model import World
from preflight.probes import setup, timing

T = TypeVar("T")
PROBE_PREFIX = keys.PROBE_PREFIX  # the probes' keys, under the run's prefix (orchestrate.run_probes)
# Joining the store a second time: it is up, this only bounds a sick one, and a slow resolver's
# lookups (store_join.HANDSHAKE_S): 10 s once left a run's probes unrun (BW009) in a loaded lab run.
SIDE_JOIN_S = store_join.HANDSHAKE_S


class ProbeStores(Struct, frozen=True):
    """The probes' two clients of the run's store, both under PROBE_PREFIX (docs/architecture.md,
    "Store clients"): `board` is the run's own client, which the thread running the steps shares
    with the beat and the watch and only ever asks calls that answer at once; `torch` is a
    connection of its own for torch's group creation and the helper threads that run it
    (`bounded`), whose store waits block for as long as a missing rank keeps them waiting."""

    board: Any
    torch: Any


def probe_stores(run_store: Any) -> ProbeStores | None:
    """The probes' clients (ProbeStores); None when no second connection can be made, so that the
    probes do not start rather than put torch's blocking waits on the run's shared client."""
    from torch.distributed import PrefixStore  # torch only once the probes run (bad input stays a fast exit 2)

    own = store_join.own_client(run_store, SIDE_JOIN_S)
    if own is None:
        return None
    return ProbeStores(board=PrefixStore(PROBE_PREFIX, run_store), torch=PrefixStore(PROBE_PREFIX, own))


class StillRunning(setup.SetupTimeout):
    """A bounded call was abandoned while it still runs (a dead peer, or the deadline)."""


@contextmanager
def watching(world: World, owner: RankLiveness) -> Iterator[RankLiveness]:
    """While the probes run: the run's liveness owner (its beats go on before and after) watches
    the probes' whole world on rank 0, and every wait of the probes asks it for dead peers."""
    if world.world_size > 1 and world.rank == 0:
        owner.watch(list(range(1, world.world_size)))
    timing.abort_check = owner.abort_reason
    try:
        yield owner
    finally:
        timing.abort_check = None


def bounded(call: Callable[[], T], timeout_s: float, watch: RankLiveness) -> T:
    """call() in a daemon thread, given up when a peer is known dead or after timeout_s (StillRunning).

    For the probes' set-up (backend vote, process group, DeviceMesh), whose store waits
    cannot be interrupted from Python: a rank that never joins would hold every other rank
    until the process group's own timeout. An abandoned call keeps its thread; the caller must
    then leave the process by os._exit (runner._leave), never tear the group down.
    """
    return off_main_thread(call, timeout_s, watch.abort_reason)


def off_main_thread(call: Callable[[], T], timeout_s: float, abort_reason: Callable[[], str]) -> T:
    """call() in a daemon thread, joined in slices: this thread stays free to run a signal handler
    (Python runs one only between bytecodes of the main thread, never while it waits inside C++:
    a store wait in torch's group creation lasts as long as a missing rank keeps it waiting).
    Given up when abort_reason() says why, or after timeout_s (StillRunning); the abandoned thread
    is recorded, so that the process leaves by os._exit."""
    box: dict[str, Any] = {}

    def target() -> None:
        try:
            box["value"] = call()
        except BaseException as exc:  # re-raised in the caller's thread
            box["error"] = exc

    thread = threading.Thread(target=target, daemon=True, name="preflight-probe-setup")
    thread.start()
    if not join_until(thread, timeout_s, stop_if=lambda: bool(abort_reason())):
        deadline.abandon(thread)
        raise StillRunning(abort_reason() or f"did not finish within {timeout_s:g}s")
    if "error" in box:
        raise box["error"]
    return box["value"]
