"""The device probes' traffic: each rank's DeviceReport to rank 0, through the channel's board.

Key (under the probes' prefix, `probe/`): `device/<rank>` (channel/keys.DEVICE). A report
that does not decode (a BadValue naming its rank) is counted as not received (rank 0 then says
the device could not be measured); a report naming another rank is refused the same way: a rank
speaks only for itself.
"""

from __future__ import annotations

from collections.abc import Callable

from preflight.channel import keys
from preflight.channel.board import BadValue, Board
from preflight.lib.waiting import wait_until
from preflight.model.device_probe import DeviceReport


def publish(board: Board, report: DeviceReport) -> None:
    """This rank's device report, for rank 0."""
    board.put(keys.DEVICE.at(report.rank), report)


def gather(board: Board, world_size: int, timeout_s: float,
           dead: Callable[[], dict[int, str]] | None = None) -> tuple[dict[int, DeviceReport], dict[int, str]]:
    """Every rank's report, waiting at most timeout_s (not for ranks known dead).

    Returns (reports by rank, rank -> why it has none) for the ranks whose report did not come
    or could not be read.
    """
    got: dict[int, DeviceReport] = {}
    bad: dict[int, str] = {}

    def settled() -> bool:
        awaited = [r for r in range(world_size) if r not in got and r not in bad]
        for rank, value in zip(awaited, board.fetch([keys.DEVICE.at(r) for r in awaited], awaited),
                               strict=True):
            if value is None:
                continue
            if isinstance(value, BadValue):
                bad[rank] = f"its device report could not be read ({value.why})"
            elif value.rank != rank:
                bad[rank] = f"its device report claims to be rank {value.rank}'s"
            else:
                got[rank] = value
        gone = dead() if dead is not None else {}
        return all(r in got or r in bad or r in gone for r in range(world_size))

    wait_until(settled, timeout_s)
    gone = dead() if dead is not None else {}
    for rank in range(world_size):
        if rank not in got and rank not in bad:
            bad[rank] = f"died ({gone[rank]})" if rank in gone else "sent no device report in time"
    return got, bad
