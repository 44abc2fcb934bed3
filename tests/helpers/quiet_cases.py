"""Cases for tests/helpers/test_quiet.py's inner `pytest -n 2` run (not collected by the suite:
the name is not test_*). Each test writes when it started and ended, on which worker, and the nice
values of its own process, of a child it starts, and of a child its worker started before any test
(as a worker's zygote is)."""

from __future__ import annotations

import atexit
import json
import os
import subprocess
import time

import pytest

SECONDS = 1.0
ELDER = subprocess.Popen(["sleep", "300"])  # started at collection, before any test's priority moved
atexit.register(ELDER.kill)


def _timed(name: str) -> None:
    start = time.monotonic()
    nice = os.getpriority(os.PRIO_PROCESS, 0)
    child = int(subprocess.run(["nice"], capture_output=True, text=True, check=True).stdout)
    elder = os.getpriority(os.PRIO_PROCESS, ELDER.pid)
    time.sleep(SECONDS)
    with open(os.environ["QUIET_CASES_LOG"], "a") as log:
        log.write(json.dumps({"test": name, "worker": os.environ.get("PYTEST_XDIST_WORKER"), "start": start,
                              "end": time.monotonic(), "nice": [nice, child, elder]}) + "\n")


@pytest.mark.parametrize("n", range(4))
def test_ordinary_before(n: int) -> None:
    _timed(f"ordinary-{n}")


@pytest.mark.quiet
def test_quiet() -> None:
    _timed("quiet")


@pytest.mark.quiet(alone=True)
def test_quiet_alone() -> None:
    _timed("alone")


@pytest.mark.parametrize("n", range(4, 8))
def test_ordinary_after(n: int) -> None:
    _timed(f"ordinary-{n}")
