"""HistoryOptions (preflight/options_history.py): `preflight history`'s flags typed and validated
once where they enter, with RunOptions' own limits for the same things."""

from __future__ import annotations

import time

import pytest

from preflight.lib.errors import BadInput
from preflight.options import MAX_SECONDS, RunOptions
from preflight.options_history import HistoryOptions

URL = "sqlite:////tmp/nowhere/h.db"


def test_the_flags_as_written_become_typed_values() -> None:
    options = HistoryOptions.parse(history=URL, since="2d", last="7", flaky="2/5", older_than="90d", timeout="12.5",
                                   action="exclude", host="n1")
    assert (options.url, options.last, options.flaky, options.timeout_s, options.host) == (URL, 7, (2, 5), 12.5, "n1")
    assert options.older_than_s == 90 * 86400
    assert options.since is not None and abs(time.time() - 2 * 86400 - options.since) < 60
    assert options.filters().host == "n1" and options.filters().last == 7


def test_history_comes_from_the_environment_when_no_flag(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PREFLIGHT_HISTORY", URL)
    assert HistoryOptions.parse().url == URL
    monkeypatch.delenv("PREFLIGHT_HISTORY")
    with pytest.raises(BadInput, match="PREFLIGHT_HISTORY"):
        HistoryOptions.parse()


@pytest.mark.parametrize(("typed", "says"), [
    ({"flaky": (5, 2)}, r"--flaky 5/2: K/N with 1 <= K <= N"),
    ({"timeout_s": 0.0}, r"must be above 0"),
    ({"timeout_s": MAX_SECONDS * 2}, r"at most"),
    ({"timeout_s": float("nan")}, r"must be above 0"),
    ({"last": 0}, r"--last 0"),
    ({"action": "prune"}, r"prune needs --older-than"),
    ({"action": "exclude"}, r"exclude needs --flaky"),
    ({"action": "drop"}, r"one of show, exclude, prune"),
    ({"url": "mysql://x/y"}, r"--history"),
])
def test_a_typed_value_out_of_bounds_is_refused_where_it_enters(typed: dict, says: str) -> None:
    """Validated in __post_init__: built from typed values (not only from text), the bounds still hold."""
    with pytest.raises(BadInput, match=says):
        HistoryOptions(**{"url": URL, **typed})


def test_run_and_history_refuse_the_same_flaky_and_timeout_alike() -> None:
    """One limit each, written once: `preflight run --flaky 5/2` and `preflight history exclude --flaky 5/2`
    give the same message; so does a history timeout over the cap."""
    with pytest.raises(BadInput) as run:
        RunOptions.build(flaky="5/2")
    with pytest.raises(BadInput) as history:
        HistoryOptions(url=URL, action="exclude", flaky=(5, 2))
    assert str(run.value) == str(history.value)
    with pytest.raises(BadInput, match=f"at most {MAX_SECONDS:g}"):
        RunOptions.build(history_timeout_s=MAX_SECONDS * 2)
    with pytest.raises(BadInput, match=f"at most {MAX_SECONDS:g}"):
        HistoryOptions(url=URL, timeout_s=MAX_SECONDS * 2)
