"""Opening a history database: one code path for SQLite and PostgreSQL (SQLAlchemy Core 2, psycopg 3).

`sqlite:///path/history.db` is the default kind: one file, e.g. on the cluster's shared
filesystem. Every connection runs in WAL mode with a busy timeout, and every write
transaction starts with BEGIN IMMEDIATE, so concurrent jobs queue for the write lock instead
of failing with "database is locked" when a deferred transaction tries to upgrade its read
lock. `postgresql://user@host/db` is the fleet kind; the schema check there takes a
transaction-scoped advisory lock, so many first writers cannot race to create the tables.

Every failure becomes `HistoryError`, one line saying what is wrong and with which URL (its
password hidden). A database that is corrupt, is not a preflight history, or carries a newer
schema is refused and never written to.
"""

from __future__ import annotations

import os
import sqlite3
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from sqlalchemy import Connection, Engine, create_engine, event, inspect, select, text
from sqlalchemy.engine import make_url
from sqlalchemy.exc import ArgumentError, DBAPIError, SQLAlchemyError
from sqlalchemy.pool import NullPool

from preflight.history import schema
from preflight.lib.waiting import wait_until

SCHEMES = ("sqlite", "postgresql")
PG_LOCK_KEY = 0x70726566  # "pref": the advisory lock that serialises schema creation on PostgreSQL


class HistoryError(Exception):
    """The history cannot be used: one line, for the report's finding or the CLI's error."""


def check_url(url: str) -> str:
    """The URL when it names a kind preflight writes (sqlite:///..., postgresql://...); else HistoryError."""
    try:
        parsed = make_url(url)
    except ArgumentError:
        raise HistoryError(f"{url[:80]!r} is not a database URL (sqlite:///path/history.db or "
                           "postgresql://user@host/db)") from None
    if parsed.get_backend_name() not in SCHEMES:
        raise HistoryError(f"{parsed.render_as_string(hide_password=True)[:80]!r}: only sqlite:///... and "
                           "postgresql://... histories are supported")
    if parsed.get_backend_name() == "sqlite" and not parsed.database:
        raise HistoryError("sqlite:// needs a file: sqlite:///path/history.db (an in-memory history keeps nothing)")
    return url


def shown_url(url: str) -> str:
    """The URL as messages show it: the password hidden."""
    try:
        return make_url(url).render_as_string(hide_password=True)
    except ArgumentError:
        return url[:80]


def missing_file(url: str) -> bool:
    """True for a sqlite:/// URL whose file does not exist yet (reading it must not create it)."""
    parsed = make_url(check_url(url))
    path = parsed.database or ""
    return parsed.get_backend_name() == "sqlite" and not path.startswith("file:") and not os.path.exists(path)


def sqlite_file(url: str) -> str | None:
    """The file a sqlite:/// history writes (None for PostgreSQL or a `file:` URI): checked before the run."""
    parsed = make_url(check_url(url))
    path = parsed.database or ""
    return path if parsed.get_backend_name() == "sqlite" and not path.startswith("file:") else None


def engine_for(url: str, timeout_s: float) -> Engine:
    """An engine for the history at url; every wait (lock, connect, statement) bounded by timeout_s."""
    parsed = make_url(check_url(url))
    if parsed.get_backend_name() == "sqlite":
        return _sqlite_engine(parsed, timeout_s)
    parsed = parsed.set(drivername="postgresql+psycopg")
    millis = max(1, int(timeout_s * 1000))
    return create_engine(parsed, poolclass=NullPool, connect_args={
        "connect_timeout": max(1, int(timeout_s)),
        "options": f"-c statement_timeout={millis} -c lock_timeout={millis}",
        "application_name": "preflight",
    })


def _sqlite_engine(parsed: Any, timeout_s: float) -> Engine:
    path = parsed.database or ""
    if not path.startswith("file:"):  # a plain path: it must exist, or its folder must, before sqlite makes one
        folder = os.path.dirname(os.path.abspath(path))
        if not os.path.isdir(folder):
            raise HistoryError(f"{shown_url(str(parsed))}: no folder {folder}")
    engine = create_engine(parsed, poolclass=NullPool, connect_args={"timeout": timeout_s})

    @event.listens_for(engine, "connect")
    def _on_connect(dbapi: sqlite3.Connection, record: Any) -> None:
        dbapi.isolation_level = None  # SQLAlchemy's begin event below issues BEGIN itself
        cursor = dbapi.cursor()
        cursor.execute(f"PRAGMA busy_timeout = {int(timeout_s * 1000)}")
        cursor.execute("PRAGMA foreign_keys = ON")
        # WAL is written into the file's header: only into a new file or a preflight history, never
        # into someone else's database (which ensure_schema then refuses, unchanged).
        tables = {row[0] for row in cursor.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
        if not tables or schema.meta.name in tables:
            _switch_to_wal(cursor, timeout_s)
        cursor.execute("PRAGMA synchronous = NORMAL")  # WAL's safe setting: a commit survives the job's crash
        cursor.close()

    @event.listens_for(engine, "begin")
    def _on_begin(conn: Connection) -> None:
        immediate = conn.get_execution_options().get("preflight_write", False)
        conn.exec_driver_sql("BEGIN IMMEDIATE" if immediate else "BEGIN")

    return engine


def _switch_to_wal(cursor: sqlite3.Cursor, timeout_s: float) -> None:
    """PRAGMA journal_mode = WAL (persistent in the file), retried for `timeout_s` while the file is locked.

    SQLite answers the switch with "database is locked" at once, without its busy handler, while
    another connection holds the write lock of a file still in rollback mode: the first writers
    into a new history race there (1 of 64 at once did, on a loaded machine). A read-only file
    keeps its mode; reading it still works.
    """
    locked: list[sqlite3.OperationalError] = []

    def switched() -> bool:
        try:
            cursor.execute("PRAGMA journal_mode = WAL")
        except sqlite3.OperationalError as exc:
            if "readonly" in str(exc) or "read-only" in str(exc):
                return True
            if "locked" not in str(exc):
                raise
            locked[:] = [exc]
            return False
        return True

    if not wait_until(switched, timeout_s, max_poll_s=0.1):
        raise locked[-1]  # still locked at the deadline: describe_failure says so


@contextmanager
def transaction(url: str, timeout_s: float, *, write: bool) -> Iterator[Connection]:
    """One transaction on the history, its schema checked (and, when writing, created or migrated) first.

    `conn.info["preflight_empty"]` is True when reading a database without the history's
    tables. Every database error becomes HistoryError with one line.
    """
    engine = engine_for(url, timeout_s)
    try:
        with engine.connect() as conn:
            conn = conn.execution_options(preflight_write=write)
            with conn.begin():
                if write and conn.dialect.name == "postgresql":
                    conn.execute(text("SELECT pg_advisory_xact_lock(:key)"), {"key": PG_LOCK_KEY})
                conn.info["preflight_empty"] = not ensure_schema(conn, url, create=write)
                yield conn
    except HistoryError:
        raise
    except (DBAPIError, SQLAlchemyError, sqlite3.Error, OSError) as exc:
        raise HistoryError(describe_failure(url, exc)) from None
    finally:
        engine.dispose()


def ensure_schema(conn: Connection, url: str, *, create: bool) -> bool:
    """True when the schema is there (created or migrated when `create`); refuse a newer or foreign one."""
    have = inspect(conn)
    if not have.has_table(schema.meta.name):
        if have.has_table(schema.runs.name):
            raise HistoryError(f"{shown_url(url)}: has a `runs` table but is not a preflight history "
                               "(no preflight_meta): refusing to write to it")
        if not create:
            return False
        schema.metadata.create_all(conn)
        conn.execute(schema.meta.insert().values(key="schema_version", value=str(schema.SCHEMA_VERSION)))
        return True
    raw = conn.execute(select(schema.meta.c.value).where(schema.meta.c.key == "schema_version")).scalar()
    version = int(raw) if raw is not None and str(raw).isdigit() else -1
    if version > schema.SCHEMA_VERSION:
        raise HistoryError(f"{shown_url(url)}: history schema {version} is newer than this preflight's "
                           f"{schema.SCHEMA_VERSION}: upgrade preflight to use it (left untouched)")
    if version < 1:
        raise HistoryError(f"{shown_url(url)}: unreadable schema version {str(raw)[:40]!r}: not written to")
    if version < schema.SCHEMA_VERSION and create:
        for step in range(version, schema.SCHEMA_VERSION):
            schema.MIGRATIONS[step](conn)
        conn.execute(schema.meta.update().where(schema.meta.c.key == "schema_version")
                     .values(value=str(schema.SCHEMA_VERSION)))
    return True


def describe_failure(url: str, exc: BaseException) -> str:
    """One line for a database failure, naming the usual cause."""
    text_ = str(getattr(exc, "orig", None) or exc).strip()
    detail = text_.splitlines()[0][:200] if text_ else type(exc).__name__
    lowered = detail.lower()
    if "not a database" in lowered or "malformed" in lowered:
        what = "corrupt (not a SQLite database): left untouched"
    elif "locked" in lowered or "lock timeout" in lowered:
        what = "locked by another writer past the deadline"
    elif "readonly" in lowered or "read-only" in lowered or "read only" in lowered:
        what = "read-only"
    elif "unable to open" in lowered or "permission" in lowered:
        what = "cannot be opened"
    else:
        what = "unusable"
    return f"history {shown_url(url)} {what}: {detail}"
