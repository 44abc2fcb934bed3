"""Device reports through a real c10d store (HashStore) and the channel's board: what rank 0 accepts."""

from __future__ import annotations

from torch.distributed import HashStore

from preflight.channel.board import MAX_VALUE_BYTES, Board
from preflight.model.codec import encode
from preflight.model.device_probe import DeviceReport, Measured
from preflight.probes.device import store as device_store


def test_reports_round_trip_and_a_bad_or_foreign_one_is_not_received() -> None:
    store = HashStore()
    sent = DeviceReport(0, "node0", "cpu", name="AMD EPYC", measured=[Measured("copy", [1.0, 2.0], [3.0], 4096, 7)],
                        sdc_digest="ab" * 16)
    device_store.publish(Board(store), sent)
    store.set("device/1", b'{"rank": 1, "host": ["not", "a", "host"], "kind": "cpu"}')  # wrong type
    store.set("device/2", encode(DeviceReport(3, "node3", "cpu")))  # speaks for another rank
    store.set("device/3", b"x" * (MAX_VALUE_BYTES + 1))  # too large to parse
    got, missing = device_store.gather(Board(store), 5, timeout_s=0.5, dead=lambda: {})
    assert got == {0: sent}
    assert "could not be read" in missing[1] and "claims to be rank 3" in missing[2]
    assert "could not be read" in missing[3] and missing[4] == "sent no device report in time"


def test_dead_rank_is_not_waited_for() -> None:
    store = HashStore()
    device_store.publish(Board(store), DeviceReport(0, "node0", "cpu"))
    got, missing = device_store.gather(Board(store), 2, timeout_s=600, dead=lambda: {1: "silent for 10s"})
    assert list(got) == [0] and missing == {1: "died (silent for 10s)"}
