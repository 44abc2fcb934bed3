"""The secret detector, fuzzed: every planted shape is found wherever it sits in a value, the
detector is linear (no value takes long), and a redacted command line keeps no secret."""

from __future__ import annotations

import re
import time

import pytest
from hypothesis import given
from hypothesis import strategies as st

from preflight.lib import secrets
from preflight.lib.secrets import MAX_SCANNED_CHARS, REDACTED, is_secret_value, redact_command, redact_environment
from tests.fuzz.strategies import FUZZ
from tests.helpers.secret_shapes import shapes

SHAPES = shapes(7)
padding = st.text(alphabet=st.characters(codec="utf-8", exclude_characters="@:/=&?"), max_size=40)


@FUZZ
@given(st.sampled_from(sorted(SHAPES)), padding, padding, st.sampled_from([" ", "\n", "\t", ";", ","]))
def test_every_shape_is_found_anywhere_in_a_value(name: str, before: str, after: str, gap: str) -> None:
    value, _ = SHAPES[name]
    assert is_secret_value(f"{before}{gap}{value}{gap}{after}"), (before, value, after)


@FUZZ
@given(st.sampled_from(sorted(SHAPES)), st.sampled_from(["--db", "--url", "-x"]),
       padding.filter(lambda s: " " not in s))
def test_redacted_command_keeps_no_planted_secret(name: str, flag: str, word: str) -> None:
    value, marker = SHAPES[name]
    if any(c.isspace() for c in value):
        return  # multi-word shapes (libpq, PEM) are found per word in a command: covered below
    command = f"python train.py {word} {flag} {value} --port 5"
    assert marker not in redact_command(command)


def test_command_flags_and_assignments() -> None:
    command = ("python srv.py --db postgres://u:p/w@h/db --token abc --api-key=zz DB_PASSWORD=hunter2 "
               "--conn host=h password=pf3pw --port 5")
    redacted = redact_command(command)
    for secret in ("p/w@h", "abc", "zz", "hunter2", "pf3pw"):
        assert secret not in redacted.split(), redacted
    assert "--port 5" in redacted and redacted.startswith("python srv.py --db <redacted>")


@FUZZ
@given(st.text(max_size=2000), st.sampled_from(["", "a", "eyJ", "://", "a://b:", "password", "glpat-", "AIza",
                                                  "hooks.slack.com/services/", "-----BEGIN ", "\\\\", "//"]))
def test_detector_never_raises_on_any_text(text: str, seed: str) -> None:
    is_secret_value(seed * 50 + text)
    redact_command(text + " " + seed)


ADVERSARIAL = ["a" * MAX_SCANNED_CHARS, "eyJ" * 5461, "eyJ-" * 4096, "/" * MAX_SCANNED_CHARS, "a://b:" * 2730,
               "password " * 1820, "xoxb-1-" * 2340, "//a/:_authToken=" * 1000, ":" * MAX_SCANNED_CHARS,
               "https://hooks.slack.com/services/T" * 460, "AIza" * 4096, "glpat-" * 2730, "0-" * 8192,
               "a:" * 8192 + "@", "-----BEGIN " * 1489]


@pytest.mark.parametrize("value", ADVERSARIAL, ids=lambda v: repr(v[:12]))
def test_detector_is_linear_on_adversarial_values(value: str) -> None:
    """A backtracking pattern spends seconds of CPU on these 16 KiB values; a linear scan milliseconds. The
    clock is this thread's CPU time, not the wall's: another process's load does not move it."""
    is_secret_value("warm up")
    started = time.thread_time()
    is_secret_value(value[:MAX_SCANNED_CHARS])
    assert time.thread_time() - started < 0.25


def test_a_huge_value_is_redacted_at_once_and_never_kept(monkeypatch: pytest.MonkeyPatch) -> None:
    """A value over MAX_SCANNED_CHARS is redacted by its length alone: no pattern ever reads it."""
    scanned: list[int] = []

    class Watched:
        def __init__(self, pattern: re.Pattern[str]) -> None:
            self.pattern = pattern

        def search(self, value: str) -> re.Match[str] | None:
            scanned.append(len(value))
            return self.pattern.search(value)

    monkeypatch.setattr(secrets, "_SECRET_VALUE", Watched(secrets._SECRET_VALUE))
    detectors = tuple(Watched(p) for p in secrets._detector_patterns())
    monkeypatch.setattr(secrets, "_detector_patterns", lambda: detectors)
    env = redact_environment({"BLOB": "q" * 120_000, "BIG": "x" * 50_000_000, "SHORT": "fine"})
    assert env == {"BLOB": REDACTED, "BIG": REDACTED, "SHORT": "fine"}
    assert scanned and max(scanned) <= MAX_SCANNED_CHARS  # only SHORT was scanned
