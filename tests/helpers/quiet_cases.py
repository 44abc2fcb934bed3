"""Cases for tests/helpers/test_quiet.py's inner `pytest -n 2` run (not collected by the suite:
the name is not test_*). Each test writes when it started and ended, and on which worker."""

from __future__ import annotations

import json
import os
import time

import pytest

SECONDS = 1.0


def _timed(name: str) -> None:
    start = time.monotonic()
    time.sleep(SECONDS)
    with open(os.environ["QUIET_CASES_LOG"], "a") as log:
        log.write(json.dumps({"test": name, "worker": os.environ.get("PYTEST_XDIST_WORKER"),
                              "start": start, "end": time.monotonic()}) + "\n")


@pytest.mark.parametrize("n", range(4))
def test_ordinary_before(n: int) -> None:
    _timed(f"ordinary-{n}")


@pytest.mark.quiet
def test_quiet() -> None:
    _timed("quiet")


@pytest.mark.parametrize("n", range(4, 8))
def test_ordinary_after(n: int) -> None:
    _timed(f"ordinary-{n}")
