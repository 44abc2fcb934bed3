"""The history store on real databases: a real SQLite file and a real PostgreSQL server
(tests/helpers/postgres.py), each with 64 writer processes at once; and every way a history
can be unusable (corrupt, newer schema, someone else's tables, read-only, locked): one line,
and the database left as it was.

The runs written are FAKE reports (tests/helpers/synthetic.history_report): what is tested
here is the store, not the probes.
"""

from __future__ import annotations

import hashlib
import json
import multiprocessing
import sqlite3
import threading
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import func, select

from preflight.commands.cli import main
from preflight.history import schema
from preflight.history.record import write_run
from preflight.history.store import HistoryError, transaction
from tests.helpers.synthetic import history_report

WRITERS = 64


def _write_one(url: str, index: int, barrier: Any, errors: Any) -> None:
    report = history_report(f"run-{index}", [f"node{index % 8}", f"node{(index + 1) % 8}"])
    try:
        barrier.wait(timeout=120)  # everyone writes at once
        with transaction(url, 60.0, write=True) as conn:
            write_run(conn, report)
    except BaseException as exc:  # reported to the test, which fails on any
        errors.put(f"writer {index}: {type(exc).__name__}: {exc}")


def _write_concurrently(url: str) -> list[str]:
    context = multiprocessing.get_context("fork")
    barrier, errors = context.Barrier(WRITERS), context.Queue()
    writers = [context.Process(target=_write_one, args=(url, i, barrier, errors)) for i in range(WRITERS)]
    for w in writers:
        w.start()
    for w in writers:
        w.join(timeout=300)
    failed = [errors.get(timeout=1) for _ in range(errors.qsize())] if not errors.empty() else []
    return failed + [f"writer exit {w.exitcode}" for w in writers if w.exitcode != 0]


def _assert_every_run_present(url: str) -> None:
    with transaction(url, 30.0, write=False) as conn:
        run_ids = sorted(conn.execute(select(schema.runs.c.run_id)).scalars())
        assert run_ids == sorted(f"run-{i}" for i in range(WRITERS))
        # Each run's rows arrived with it, none lost or doubled: 2 hosts each, 2 sizes x 2 hosts of figures.
        assert conn.execute(select(func.count()).select_from(schema.run_hosts)).scalar() == 2 * WRITERS
        assert conn.execute(select(func.count()).select_from(schema.figures)).scalar() == 4 * WRITERS


@pytest.mark.timeout(600)
def test_64_concurrent_writers_into_one_sqlite_file(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'history.db'}"
    assert _write_concurrently(url) == []
    _assert_every_run_present(url)
    assert sqlite3.connect(tmp_path / "history.db").execute("PRAGMA journal_mode").fetchone()[0] == "wal"


@pytest.mark.timeout(600)
def test_64_concurrent_writers_into_postgresql(postgres) -> None:
    # The first writers race to create the schema: the advisory lock makes that one transaction at a time.
    assert _write_concurrently(postgres.url) == []
    _assert_every_run_present(postgres.url)


def _digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _write(url: str, timeout_s: float = 5.0) -> None:
    with transaction(url, timeout_s, write=True) as conn:
        write_run(conn, history_report("r", ["a"]))


def test_corrupt_sqlite_file_is_one_line_and_left_untouched(tmp_path: Path) -> None:
    db = tmp_path / "history.db"
    db.write_bytes(b"this is not a database, it is a text file someone wrote here\n" * 100)
    before = _digest(db)
    with pytest.raises(HistoryError) as caught:
        _write(f"sqlite:///{db}")
    message = str(caught.value)
    assert "corrupt" in message and str(db) in message and "\n" not in message
    assert _digest(db) == before


def test_newer_schema_is_refused_and_left_untouched(tmp_path: Path) -> None:
    db = tmp_path / "history.db"
    url = f"sqlite:///{db}"
    _write(url)
    raw = sqlite3.connect(db)
    with raw:
        raw.execute("UPDATE preflight_meta SET value = '99' WHERE key = 'schema_version'")
    raw.close()  # the last connection: SQLite checkpoints the WAL into the file, whose bytes are then compared
    before = _digest(db)
    with pytest.raises(HistoryError, match=r"history schema 99 is newer than this preflight's 1"):
        _write(url)
    with pytest.raises(HistoryError, match="newer"):
        with transaction(url, 5.0, write=False):
            pass
    assert _digest(db) == before


def test_someone_elses_database_is_not_written_to(tmp_path: Path) -> None:
    db = tmp_path / "other.db"
    with sqlite3.connect(db) as raw:
        raw.execute("CREATE TABLE runs (id INTEGER PRIMARY KEY, what TEXT)")
    before = _digest(db)
    with pytest.raises(HistoryError, match="not a preflight history"):
        _write(f"sqlite:///{db}")
    assert _digest(db) == before


def test_read_only_sqlite_history_is_one_line(tmp_path: Path) -> None:
    db = tmp_path / "history.db"
    _write(f"sqlite:///{db}")
    before = _digest(db)
    # Opened read-only (as a job without write access to the shared file would have it).
    with pytest.raises(HistoryError, match="read-only") as caught:
        _write(f"sqlite:///file:{db}?mode=ro&uri=true")
    assert "\n" not in str(caught.value)
    assert _digest(db) == before


def test_locked_sqlite_history_gives_up_at_its_deadline(tmp_path: Path) -> None:
    db = tmp_path / "history.db"
    url = f"sqlite:///{db}"
    _write(url)
    holder = sqlite3.connect(db, isolation_level=None)
    holder.execute("BEGIN EXCLUSIVE")  # another job holds the write lock
    try:
        with pytest.raises(HistoryError, match="locked") as caught:
            _write(url, timeout_s=1.0)
        assert "\n" not in str(caught.value)
    finally:
        holder.execute("ROLLBACK")
        holder.close()
    with transaction(url, 5.0, write=False) as conn:
        assert conn.execute(select(func.count()).select_from(schema.runs)).scalar() == 1


def test_a_new_history_whose_write_lock_another_writer_holds_is_waited_for_not_refused(tmp_path: Path) -> None:
    # The first writers into a new file race: while one holds the write lock of the file (still in
    # rollback mode), SQLite refuses another's switch to WAL at once, without its busy handler.
    db = tmp_path / "history.db"
    holder = sqlite3.connect(db, isolation_level=None, check_same_thread=False)
    holder.execute("BEGIN IMMEDIATE")
    release = threading.Timer(1.0, lambda: holder.execute("COMMIT"))
    release.start()
    try:
        _write(f"sqlite:///{db}", timeout_s=120.0)
    finally:
        release.join()
        holder.close()
    with transaction(f"sqlite:///{db}", 5.0, write=False) as conn:
        assert conn.execute(select(func.count()).select_from(schema.runs)).scalar() == 1


def test_read_only_postgresql_history_is_one_line(postgres) -> None:
    _write(postgres.url)
    postgres.psql("CREATE ROLE reader LOGIN")
    postgres.psql("GRANT SELECT ON ALL TABLES IN SCHEMA public TO reader")
    reader_url = postgres.url.replace("pf@", "reader@")
    with pytest.raises(HistoryError, match=r"permission denied|read-only|unusable") as caught:
        _write(reader_url)
    assert "\n" not in str(caught.value)
    with transaction(reader_url, 5.0, write=False) as conn:  # reading still works
        assert conn.execute(select(func.count()).select_from(schema.runs)).scalar() >= 1


def test_postgresql_answers_history_and_the_rules_as_sqlite_does(postgres, tmp_path: Path,
                                                                  capsys: pytest.CaptureFixture[str]) -> None:
    # One code path: the same queries, rules and CLI on a real PostgreSQL (a fresh database of its own).
    postgres.psql("CREATE DATABASE rules")
    url = postgres.url.rsplit("/", 1)[0] + "/rules"
    for i in range(6):
        with transaction(url, 10.0, write=True) as conn:
            write_run(conn, history_report(f"pg{i}", ["p1", "p2"], bad_hosts=["p2"] if i % 2 else []))
    assert main(["history", "--history", url, "--host", "p2", "--json"]) == 0
    runs = json.loads(capsys.readouterr().out)["runs"]
    assert [r["run_id"] for r in runs] == [f"pg{i}" for i in range(5, -1, -1)]
    assert main(["history", "exclude", "--flaky", "3/6", "--history", url]) == 0
    assert [line.split()[0] for line in capsys.readouterr().out.splitlines()] == ["p2"]
