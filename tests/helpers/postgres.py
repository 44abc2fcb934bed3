"""A real PostgreSQL server for the history tests: Debian's `postgresql`, started per test module.

initdb refuses to run as root, so the cluster belongs to `nobody` in a temp folder (as the
Slurm lab runs its daemons: /work/shared/LAB.md, last section), listening on 127.0.0.1 at a
free port with trust authentication, and is stopped (and its folder removed) afterwards.
Without the package: skip with the apt line, fail under CI=true (tests/helpers/tools.py).

    def test_something(postgres_url):   # postgresql://pf@127.0.0.1:PORT/preflight
"""

from __future__ import annotations

import glob
import os
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.helpers.ranks import free_port
from tests.helpers.tools import require, require_root

PACKAGE = "postgresql"


def postgres_bin() -> Path:
    """The folder of initdb / pg_ctl (Debian keeps them out of PATH), or skip / fail in CI."""
    found = sorted(glob.glob("/usr/lib/postgresql/*/bin/initdb"))
    on_path = shutil.which("initdb")
    if not found and on_path:
        found = [os.path.realpath(on_path)]  # a link into the version's folder, which also holds createdb and psql
    require(bool(found), f"PostgreSQL's initdb is not installed: install {PACKAGE} (apt-get install {PACKAGE})")
    return Path(found[-1]).parent


def _as_nobody(argv: list[str]) -> subprocess.CompletedProcess[str]:
    done = subprocess.run(["runuser", "-u", "nobody", "--", *argv], capture_output=True, text=True, timeout=120)
    if done.returncode:
        raise RuntimeError(f"{Path(argv[0]).name} failed ({done.returncode}): {done.stderr.strip()[-800:]}")
    return done


class PostgresServer:
    """One cluster: start() returns its URL; stop() stops it and removes the folder."""

    def __init__(self) -> None:
        self.bin = postgres_bin()
        require_root()  # runuser to nobody
        self.folder = Path(tempfile.mkdtemp(prefix="pf-pg-"))
        os.chown(self.folder, *_nobody())
        self.port = free_port()
        self.url = f"postgresql://pf@127.0.0.1:{self.port}/preflight"

    def start(self) -> str:
        data = self.folder / "data"
        _as_nobody([str(self.bin / "initdb"), "-D", str(data), "-U", "pf", "--auth=trust", "-E", "UTF8"])
        _as_nobody([str(self.bin / "pg_ctl"), "-D", str(data), "-l", str(self.folder / "log"), "-w", "-t", "60",
                    "-o", f"-k {self.folder} -p {self.port} -c listen_addresses=127.0.0.1 -c max_connections=200",
                    "start"])
        _as_nobody([str(self.bin / "createdb"), "-h", "127.0.0.1", "-p", str(self.port), "-U", "pf", "preflight"])
        return self.url

    def psql(self, sql: str) -> str:
        """Run SQL as the superuser pf; its output."""
        return _as_nobody([str(self.bin / "psql"), "-h", "127.0.0.1", "-p", str(self.port), "-U", "pf", "-d",
                           "preflight", "-At", "-c", sql]).stdout

    def stop(self) -> None:
        subprocess.run(["runuser", "-u", "nobody", "--", str(self.bin / "pg_ctl"), "-D", str(self.folder / "data"),
                        "-m", "immediate", "-w", "stop"], capture_output=True, timeout=60)
        shutil.rmtree(self.folder, ignore_errors=True)


def _nobody() -> tuple[int, int]:
    import pwd

    entry = pwd.getpwnam("nobody")
    return entry.pw_uid, entry.pw_gid


@pytest.fixture(scope="module")
def postgres() -> Iterator[PostgresServer]:
    """A running PostgreSQL server for this test module (`.url`, `.psql(sql)`)."""
    server = PostgresServer()
    try:
        server.start()
        yield server
    finally:
        server.stop()
