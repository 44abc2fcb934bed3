"""Quiet tests: a timing-sensitive test runs with the two cores its own.

Under `pytest -n 4` (.ci/run) the other workers' load takes what a test's ranks get of the
two cores, unevenly: a test that compares bandwidths or times across ranks (a tbf-shaped host
against its unshaped siblings) can then see a healthy group slow down by as much as the shaped
one. Such a test is marked `@pytest.mark.quiet`; tests/conftest.py runs every test inside
`WorkerLocks.held(quiet)`. Two ways: the drain (below) by default, and raised priority where
PREFLIGHT_TEST_QUIET=raised asks for it and the worker may raise priorities (root):

- **Raised priority**: the quiet test's worker and every process under it (its zygote, which
  forks its ranks, and every process the test starts, which inherit it) run at nice -20 for the
  test's run, and back at the worker's own after it. The other workers go on at nice 0 with
  what the quiet test leaves of the cores: the scheduler gives a nice -20 process ~99% of a core
  it contends for (weights 88,761 to 1,024) and wakes it ahead of them. Measured (docs/testing.md,
  "Issue 44: quiet tests at raised priority"): the quiet group's 21 tests took 235 s beside two
  workers of ordinary tests instead of 183 s alone, while those workers did ~170 s of their work;
  the drain below left those ~180 s of two workers idle.
- **Drain** (where priorities cannot be raised): an ordinary test holds the session's shared lock
  for its whole run (setup, call, teardown, so a module fixture's launched run counts too): any
  number of ordinary tests run at once; a quiet test takes the same lock exclusively: it starts
  once the test running on every other worker has ended, and the others start their next test
  once it has ended; quiet tests that follow one another on a worker (a quiet module's) keep it
  from one to the next, so the others are drained once for the run of them, not once a test.
  A turnstile lock keeps the exclusive waiter from starving: every test passes it before asking
  for the shared lock, and a quiet test holds it while it waits, so no new ordinary test starts
  meanwhile. Both are `flock` locks on files in the directory every worker's basetemp lives in
  (the run's own, removed with it); a process that dies drops its locks with it.

A quiet test whose claim is about the job's own noise only (no false alarm on a healthy run:
tests/probes/test_no_false_alarms.py) is marked `@pytest.mark.quiet(alone=True)` and drains
wherever it runs: at raised priority another worker's load still reached its ranks (a BW003 false
alarm in CI, 2026-12-02; docs/testing.md, "Quiet tests").

Without xdist (one process) there is nobody to wait for, nothing is locked and no priority moves.
"""

from __future__ import annotations

import fcntl
import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import psutil

RAISED_NICE = -20  # the highest priority a nice value gives (setpriority(2))
# PREFLIGHT_TEST_QUIET=raised: quiet tests at raised priority beside the others (root only), not drained.
# Off by default since 2026-12-02: at raised priority other workers' load still reached quiet tests in CI
# (a false BW003 in test_no_false_alarms.py; a shaped host left unnamed in test_probes_netns.py).
QUIET_MODE = "PREFLIGHT_TEST_QUIET"


class WorkerLocks:
    """The run's two lock files, opened once per worker."""

    def __init__(self, folder: Path, raise_priority: bool = True) -> None:
        self._raise = raise_priority and can_raise_priority()
        self._turnstile = os.open(folder / "quiet-turnstile.lock", os.O_RDWR | os.O_CREAT, 0o600)
        self._tests = os.open(folder / "quiet-tests.lock", os.O_RDWR | os.O_CREAT, 0o600)
        self._exclusive = False  # still held from the quiet test before

    def drains(self, quiet: bool, alone: bool = False) -> bool:
        """Whether a test runs while every other worker waits: a quiet one unless this worker runs quiet
        tests at raised priority (asked for and allowed), and one marked `quiet(alone=True)` always."""
        return quiet and (alone or not self._raise)

    @contextmanager
    def held(self, quiet: bool, next_quiet: bool = False, *, alone: bool = False,
             next_alone: bool = False) -> Iterator[None]:
        """Hold the tests' lock, exclusively if the test drains (`drains`), for the body; a draining
        test followed by another on this worker (`next_quiet`, `next_alone`) keeps it for that one (one
        wait for the others, not one a test). A quiet test that does not drain holds the shared lock as
        an ordinary one does, and runs at raised priority instead."""
        if quiet and not self.drains(quiet, alone):
            with self.held(quiet=False), raised_priority():
                yield
            return
        drain, next_drains = self.drains(quiet, alone), self.drains(next_quiet, next_alone)
        if not (drain and self._exclusive):
            fcntl.flock(self._turnstile, fcntl.LOCK_EX)
            try:
                # A draining test waits here, turnstile held, until every other worker's test has ended.
                fcntl.flock(self._tests, fcntl.LOCK_EX if drain else fcntl.LOCK_SH)
            finally:
                fcntl.flock(self._turnstile, fcntl.LOCK_UN)
        self._exclusive = drain
        try:
            yield
        finally:
            if not (drain and next_drains):
                fcntl.flock(self._tests, fcntl.LOCK_UN)
                self._exclusive = False


def worker_locks(basetemp: str | os.PathLike[str] | None, worker: str | None) -> WorkerLocks | None:
    """The locks of an xdist worker whose basetemp is `basetemp` (None: not a worker, no locks)."""
    if not worker or not basetemp:
        return None
    # xdist gives each worker `<the run's basetemp>/<worker id>`: the parent is shared by all.
    return WorkerLocks(Path(basetemp).parent, raise_priority=os.environ.get(QUIET_MODE) == "raised")


def can_raise_priority() -> bool:
    """Whether this process may lower its nice value below its own (CAP_SYS_NICE: root)."""
    own = os.getpriority(os.PRIO_PROCESS, 0)
    try:
        os.setpriority(os.PRIO_PROCESS, 0, RAISED_NICE)
    except PermissionError:
        return False
    os.setpriority(os.PRIO_PROCESS, 0, own)
    return True


@contextmanager
def raised_priority() -> Iterator[None]:
    """This process and every process under it at RAISED_NICE for the body, at this process's own after.

    Every thread: a nice value is a thread's on Linux (setpriority(2) on a pid sets its main thread's),
    and a process forks with its forking thread's. What the body starts inherits the raised value; what
    it leaves running under the worker is set back with the rest."""
    own = os.getpriority(os.PRIO_PROCESS, 0)
    _set_tree(RAISED_NICE)
    try:
        yield
    finally:
        _set_tree(own)


def _set_tree(nice: int) -> None:
    me = psutil.Process()
    for process in [me, *me.children(recursive=True)]:
        try:
            threads = [thread.id for thread in process.threads()]
        except psutil.Error:
            continue  # ended meanwhile, or another user's we may not read
        for tid in threads:
            try:
                os.setpriority(os.PRIO_PROCESS, tid, nice)
            except OSError:
                pass  # ended meanwhile
