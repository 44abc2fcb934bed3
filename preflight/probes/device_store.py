"""The device probes' only store traffic: each rank's DeviceReport to rank 0, through the model's codec.

Keys (under the probes' prefix, `probe/`): `device/<rank>`. A report that does not decode, or is
larger than MAX_REPORT_BYTES, is counted as not received (rank 0 then says the device could not
be measured); a report naming another rank is refused the same way: a rank speaks only for
itself. This is the one module to move onto the store channel (preflight/channel) at merge.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from preflight.lib.waiting import wait_until
from preflight.model.codec import BadPayload, decode, encode
from preflight.model.device_probe import DeviceReport

MAX_REPORT_BYTES = 256 * 2**10  # a few dozen figures and NVML samples: far under this


def _key(rank: int) -> str:
    return f"device/{rank}"


def publish(store: Any, report: DeviceReport) -> None:
    """This rank's device report, for rank 0."""
    store.set(_key(report.rank), encode(report))


def gather(store: Any, world_size: int, timeout_s: float,
           dead: Callable[[], dict[int, str]] | None = None) -> tuple[dict[int, DeviceReport], dict[int, str]]:
    """Every rank's report, waiting at most timeout_s (not for ranks known dead).

    Returns (reports by rank, rank -> why it has none) for the ranks whose report did not come
    or could not be read.
    """
    got: dict[int, DeviceReport] = {}
    bad: dict[int, str] = {}

    def settled() -> bool:
        for rank in range(world_size):
            if rank in got or rank in bad or not store.check([_key(rank)]):
                continue
            try:
                report = decode(store.get(_key(rank)), DeviceReport, max_bytes=MAX_REPORT_BYTES)
            except BadPayload as exc:
                bad[rank] = f"its device report could not be read ({exc})"
                continue
            if report.rank != rank:
                bad[rank] = f"its device report claims to be rank {report.rank}'s"
                continue
            got[rank] = report
        gone = dead() if dead is not None else {}
        return all(r in got or r in bad or r in gone for r in range(world_size))

    wait_until(settled, timeout_s)
    gone = dead() if dead is not None else {}
    for rank in range(world_size):
        if rank not in got and rank not in bad:
            bad[rank] = f"died ({gone[rank]})" if rank in gone else "sent no device report in time"
    return got, bad
