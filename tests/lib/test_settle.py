"""The debounce (preflight/lib/settle.py): a transient state is read again before it is judged."""

from __future__ import annotations

from preflight.lib.settle import grace_within, settle


def test_a_state_that_settles_within_the_grace_is_returned_settled() -> None:
    states = iter(["in progress", "completed"])
    slept: list[float] = []
    value, waited = settle(lambda: next(states), lambda s: s != "completed", "not started", 1.0, slept.append)
    assert value == "completed" and waited == sum(slept) and len(slept) == 2


def test_a_state_that_does_not_settle_is_kept_after_the_whole_grace() -> None:
    reads: list[str] = []

    def read() -> str:
        reads.append("in progress")
        return "in progress"

    value, waited = settle(read, lambda s: s == "in progress", "in progress", 0.5, lambda _: None)
    assert value == "in progress" and waited == 0.5 and len(reads) >= 2


def test_a_settled_first_read_and_a_zero_grace_read_nothing_again() -> None:
    def never() -> str:
        raise AssertionError("read again")

    assert settle(never, lambda s: s != "ok", "ok", 5.0, lambda _: None) == ("ok", 0.0)
    assert settle(never, lambda s: s != "ok", "bad", 0.0, lambda _: None) == ("bad", 0.0)


def test_the_grace_fits_inside_the_gatherers_deadline() -> None:
    assert grace_within(3.0, 10.0) == 3.0 and grace_within(3.0, 2.0) == 1.0 and grace_within(3.0, -1) == 0.0
