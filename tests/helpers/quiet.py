"""Quiet tests: a timing-sensitive test runs while the other xdist workers wait.

Under `pytest -n 2` (.ci/run) the second worker's load halves what a test's ranks get of the
two cores, unevenly: a test that compares bandwidths or times across ranks (a tbf-shaped host
against its unshaped siblings) can then see a healthy group slow down by as much as the shaped
one. Such a test is marked `@pytest.mark.quiet`; tests/conftest.py runs every test inside
`WorkerLocks.held(quiet)`:

- an ordinary test holds the session's shared lock for its whole run (setup, call, teardown,
  so a module fixture's launched run counts too): any number of ordinary tests run at once;
- a quiet test takes the same lock exclusively: it starts once the test running on every other
  worker has ended, and the others start their next test once it has ended; quiet tests that
  follow one another on a worker (a quiet module's) keep it from one to the next, so the others
  are drained once for the run of them, not once a test.

A turnstile lock keeps the exclusive waiter from starving: every test passes it before asking
for the shared lock, and a quiet test holds it while it waits, so no new ordinary test starts
meanwhile. Both are `flock` locks on files in the directory every worker's basetemp lives in
(the run's own, removed with it); a process that dies drops its locks with it. Without xdist
(one process) there is nobody to wait for and nothing is locked.
"""

from __future__ import annotations

import fcntl
import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path


class WorkerLocks:
    """The run's two lock files, opened once per worker."""

    def __init__(self, folder: Path) -> None:
        self._turnstile = os.open(folder / "quiet-turnstile.lock", os.O_RDWR | os.O_CREAT, 0o600)
        self._tests = os.open(folder / "quiet-tests.lock", os.O_RDWR | os.O_CREAT, 0o600)
        self._exclusive = False  # still held from the quiet test before

    @contextmanager
    def held(self, quiet: bool, next_quiet: bool = False) -> Iterator[None]:
        """Hold the tests' lock, exclusively if `quiet`, for the body; a quiet test followed by another
        on this worker (`next_quiet`) keeps it for that one (one wait for the others, not one a test)."""
        if not (quiet and self._exclusive):
            fcntl.flock(self._turnstile, fcntl.LOCK_EX)
            try:
                # A quiet test waits here, turnstile held, until every other worker's test has ended.
                fcntl.flock(self._tests, fcntl.LOCK_EX if quiet else fcntl.LOCK_SH)
            finally:
                fcntl.flock(self._turnstile, fcntl.LOCK_UN)
        self._exclusive = quiet
        try:
            yield
        finally:
            if not (quiet and next_quiet):
                fcntl.flock(self._tests, fcntl.LOCK_UN)
                self._exclusive = False


def worker_locks(basetemp: str | os.PathLike[str] | None, worker: str | None) -> WorkerLocks | None:
    """The locks of an xdist worker whose basetemp is `basetemp` (None: not a worker, no locks)."""
    if not worker or not basetemp:
        return None
    # xdist gives each worker `<the run's basetemp>/<worker id>`: the parent is shared by all.
    return WorkerLocks(Path(basetemp).parent)
