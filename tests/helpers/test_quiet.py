"""A `quiet` test runs at raised priority beside the other workers' tests (root), or while every other
xdist worker waits (the drain, elsewhere); ordinary tests run side by side."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

from tests.helpers.quiet import QUIET_MODE, RAISED_NICE, WorkerLocks, can_raise_priority, raised_priority, worker_locks
from tests.helpers.tools import require_root

REPO = Path(__file__).resolve().parents[2]


def _later(action, started: threading.Event) -> threading.Thread:
    def run() -> None:
        started.set()
        action()
    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread


def _ordinary_test_on(worker: WorkerLocks) -> tuple[threading.Thread, threading.Event]:
    """Another worker's ordinary test, in a thread; the event is set once it holds its lock."""
    inside = threading.Event()

    def ordinary() -> None:
        with worker.held(quiet=False):
            inside.set()

    return _later(ordinary, threading.Event()), inside


def test_a_quiet_test_waits_for_the_running_ordinary_one_and_new_ones_wait_for_it(tmp_path: Path) -> None:
    # Three "workers" in one process: flock locks belong to each open file, so they contend.
    first, quiet_worker, third = (WorkerLocks(tmp_path, raise_priority=False) for _ in range(3))
    events: list[str] = []
    ordinary = first.held(quiet=False)
    ordinary.__enter__()

    def quiet() -> None:
        with quiet_worker.held(quiet=True):
            events.append("quiet start")
            time.sleep(0.3)
            events.append("quiet end")

    def late_ordinary() -> None:
        with third.held(quiet=False):
            events.append("late ordinary")

    quiet_thread = _later(quiet, threading.Event())
    time.sleep(0.3)  # the quiet test is now waiting, holding the turnstile
    late_thread = _later(late_ordinary, threading.Event())
    time.sleep(0.3)
    assert events == []  # neither started while the first ordinary test runs
    ordinary.__exit__(None, None, None)
    quiet_thread.join(30)
    late_thread.join(30)
    # The late ordinary test came after the quiet one, although it asked while the lock was shared.
    assert events == ["quiet start", "quiet end", "late ordinary"]


def test_ordinary_tests_hold_the_lock_together(tmp_path: Path) -> None:
    one, two = WorkerLocks(tmp_path, raise_priority=False), WorkerLocks(tmp_path, raise_priority=False)
    with one.held(quiet=False):
        thread, done = _ordinary_test_on(two)
        assert done.wait(30)  # the second started while the first still holds its share
    thread.join(30)


def test_quiet_tests_one_after_another_keep_the_lock_between_them(tmp_path: Path) -> None:
    quiet_worker, other = WorkerLocks(tmp_path, raise_priority=False), WorkerLocks(tmp_path, raise_priority=False)
    with quiet_worker.held(quiet=True, next_quiet=True):
        thread, started = _ordinary_test_on(other)
    assert not started.wait(0.5)  # between the two quiet tests: the other worker still waits
    with quiet_worker.held(quiet=True):  # the next one does not wait for its own lock
        assert not started.is_set()
    assert started.wait(30)
    thread.join(30)


def test_no_locks_outside_an_xdist_worker(tmp_path: Path) -> None:
    assert worker_locks(tmp_path / "popen-gw0", None) is None
    assert worker_locks(None, "gw0") is None
    assert isinstance(worker_locks(tmp_path / "popen-gw0", "gw0"), WorkerLocks)


def test_a_worker_drains_for_every_quiet_test_unless_raised_priority_is_asked_for(tmp_path: Path,
                                                                                   monkeypatch) -> None:
    monkeypatch.delenv(QUIET_MODE, raising=False)
    locks = worker_locks(tmp_path / "popen-gw0", "gw0")
    assert locks is not None and locks.drains(quiet=True) and not locks.drains(quiet=False)
    monkeypatch.setenv(QUIET_MODE, "raised")
    raised = worker_locks(tmp_path / "popen-gw1", "gw1")
    assert raised is not None and raised.drains(quiet=True) == (not can_raise_priority())


def test_under_two_workers_a_quiet_test_runs_raised_or_alone(tmp_path: Path) -> None:
    log = tmp_path / "cases.jsonl"
    run = subprocess.run([sys.executable, "-m", "pytest", "-q", "-n", "2", "--dist", "load", "-p", "no:randomly",
                          "--basetemp", str(tmp_path / "base"), "tests/helpers/quiet_cases.py"],
                         cwd=REPO, capture_output=True, text=True, timeout=240,
                         env={**os.environ, "QUIET_CASES_LOG": str(log), QUIET_MODE: "raised"})
    assert run.returncode == 0, run.stdout + run.stderr
    rows = [json.loads(line) for line in log.read_text().splitlines()]
    assert len(rows) == 10 and {row["worker"] for row in rows} == {"gw0", "gw1"}
    [quiet] = [row for row in rows if row["test"] == "quiet"]
    [alone] = [row for row in rows if row["test"] == "alone"]
    ordinary = [row for row in rows if row["test"] not in ("quiet", "alone")]
    overlapped = [row for row in ordinary if row["start"] < quiet["end"] and quiet["start"] < row["end"]]
    # Alone: drained wherever it runs, root or not; nothing overlaps it.
    assert not [row for row in rows if row is not alone and row["start"] < alone["end"] and alone["start"] < row["end"]]
    if can_raise_priority():
        # The quiet test, a process it started and one its worker started before it, all raised...
        assert quiet["nice"] == [RAISED_NICE] * 3, quiet
        # ...and set back: every ordinary test (the quiet one's worker's later ones too) ran at 0.
        assert all(row["nice"] == [0, 0, 0] for row in ordinary), rows
        assert overlapped, rows  # the other worker went on meanwhile
    else:
        assert quiet["nice"] == [0, 0, 0] and not overlapped, rows  # drained: nothing overlaps it
    # Ordinary tests did run side by side (the two workers were really both busy).
    assert any(a["worker"] != b["worker"] and a["start"] < b["end"] and b["start"] < a["end"]
               for a in ordinary for b in ordinary), rows


def test_alone_drains_even_where_priorities_can_be_raised(tmp_path: Path) -> None:
    require_root()
    locks = WorkerLocks(tmp_path)
    assert not locks.drains(quiet=True) and locks.drains(quiet=True, alone=True) and not locks.drains(quiet=False)
    with locks.held(quiet=True, alone=True):
        thread, started = _ordinary_test_on(WorkerLocks(tmp_path))
        assert not started.wait(0.5)  # the other worker waits for the one that runs alone
    assert started.wait(30)
    thread.join(30)


def test_quiet_tests_one_after_another_as_root_both_run_raised_beside_the_others(tmp_path: Path) -> None:
    require_root()
    quiet_worker, other = WorkerLocks(tmp_path), WorkerLocks(tmp_path)
    for next_quiet in (True, False):  # the first followed by another quiet test, the second by none
        with quiet_worker.held(quiet=True, next_quiet=next_quiet):
            thread, started = _ordinary_test_on(other)
            assert started.wait(30)  # not drained: the other worker's test ran meanwhile
        thread.join(30)


def test_raised_priority_reaches_every_process_under_this_one_and_is_set_back(tmp_path: Path) -> None:
    require_root()
    elder = subprocess.Popen(["sleep", "60"])
    try:
        with raised_priority():
            young = subprocess.Popen(["sleep", "60"])
            assert [os.getpriority(os.PRIO_PROCESS, pid) for pid in (0, elder.pid, young.pid)] == [RAISED_NICE] * 3
        # The one started inside is still running: it is set back with the rest.
        assert [os.getpriority(os.PRIO_PROCESS, pid) for pid in (0, elder.pid, young.pid)] == [0, 0, 0]
        young.kill()
    finally:
        elder.kill()
