"""NCCL's account of the probes' communicators: have NCCL write its INFO log to a file, read it locally.

NCCL reads NCCL_DEBUG, NCCL_DEBUG_SUBSYS and NCCL_DEBUG_FILE once per process, at its first log
call (its first communicator). Where preflight owns the process (`preflight run` / `launch` /
srun), `start` sets them before the probes' first communicator and keeps them until the probes
end: NCCL_DEBUG=INFO, the subsystems INIT,NET,GRAPH,ENV added to the job's own, and a per-rank
file in a folder of this run (`nccl.%h.%p.log`), unless the job set NCCL_DEBUG_FILE itself: then
that file is NCCL's and read (NCCL_DEBUG raised to INFO for it). What the job's own NCCL_DEBUG
would have printed on stdout is relayed there from the file once the probes end (`relay`), so
the job's output keeps what it asked for.

In-process (`preflight.check`, the trainer's communicators) NCCL's settings are fixed already:
`existing` reads the trainer's NCCL_DEBUG_FILE if it set one, else the account is unavailable
(NCCL025 says which two variables give it next time).

Each rank parses its own file (lib/nccl_log.py, bounded) and sends one NcclAccount with its
probe report: the log itself never leaves the host.
"""

from __future__ import annotations

import glob
import os
import shutil
import socket
import sys
import tempfile
from collections.abc import MutableMapping
from typing import TextIO

from msgspec import Struct, field

from preflight.lib.nccl_log import MAX_LINE, MAX_READ_BYTES, read_log_file
from preflight.model.nccl_account import NcclAccount

CAPTURE_SUBSYS = ("INIT", "NET", "GRAPH", "ENV")
NCCL_DEFAULT_SUBSYS = ("INIT", "BOOTSTRAP", "ENV")  # NCCL >= 2.23's default, kept for the job's own output
VARIABLES = ("NCCL_DEBUG", "NCCL_DEBUG_SUBSYS", "NCCL_DEBUG_FILE")
UNAVAILABLE_IN_PROCESS = ("the trainer formed its communicators before preflight.check and set no NCCL_DEBUG_FILE; "
                          "set NCCL_DEBUG=INFO and NCCL_DEBUG_FILE=<dir>/nccl.%h.%p.log before its first "
                          "communicator")


class NcclCapture(Struct):
    """Where NCCL writes this process's log, and what to put back afterwards."""

    pattern: str = ""  # NCCL_DEBUG_FILE as NCCL expands it (%h, %p); "" when there is none to read
    folder: str = ""  # a folder preflight made (removed by close), "" when the file is the job's
    relay_level: str = ""  # the job's own NCCL_DEBUG: what to echo on stdout from the file
    source: str = ""  # "captured" | "NCCL_DEBUG_FILE" (the job's own file) | ""
    unavailable: str = ""  # why there is no account to read
    saved: dict[str, str | None] = field(default_factory=dict)

    def path(self, host: str | None = None, pid: int | None = None) -> str:
        """The file NCCL opened in this process (its %h and %p expanded as NCCL does)."""
        host = host or socket.gethostname().split(".")[0]  # NCCL's getHostName stops at the first dot
        path = self.pattern.replace("%h", host).replace("%p", str(os.getpid() if pid is None else pid))
        if "%h" in self.pattern and not os.path.exists(path):  # a host name NCCL spelled otherwise
            found = sorted(glob.glob(glob.escape(self.pattern).replace("%h", "*").replace(
                "%p", str(os.getpid() if pid is None else pid))))
            return found[0] if found else path
        return path


def _subsys(current: str | None) -> str:
    """The job's subsystems plus ours; a `^` (all but) list becomes ALL but nothing ours."""
    if current and current.strip().startswith("^"):
        excluded = [s for s in current.strip()[1:].split(",") if s.strip().upper() not in CAPTURE_SUBSYS]
        return "^" + ",".join(excluded) if excluded else "ALL"
    names = [s.strip().upper() for s in (current.split(",") if current else NCCL_DEFAULT_SUBSYS) if s.strip()]
    return ",".join(dict.fromkeys([*names, *CAPTURE_SUBSYS]))


def start(environ: MutableMapping[str, str] | None = None) -> NcclCapture:
    """Set NCCL's debug variables for the probes' communicators (before the first one); `close` restores them."""
    env = os.environ if environ is None else environ
    capture = NcclCapture(saved={name: env.get(name) for name in VARIABLES})
    own_file = env.get("NCCL_DEBUG_FILE", "").strip()
    if own_file:
        capture.pattern, capture.source = own_file, "NCCL_DEBUG_FILE"
    else:
        capture.folder = tempfile.mkdtemp(prefix="preflight-nccl-")
        capture.pattern = os.path.join(capture.folder, "nccl.%h.%p.log")
        capture.relay_level = env.get("NCCL_DEBUG", "").strip().upper()
        capture.source = "captured"
        env["NCCL_DEBUG_FILE"] = capture.pattern
    env["NCCL_DEBUG"] = "INFO"
    env["NCCL_DEBUG_SUBSYS"] = _subsys(env.get("NCCL_DEBUG_SUBSYS"))
    return capture


def existing(environ: MutableMapping[str, str] | None = None) -> NcclCapture:
    """In-process: the trainer's NCCL_DEBUG_FILE, read as it is; nothing is set."""
    env = os.environ if environ is None else environ
    own_file = env.get("NCCL_DEBUG_FILE", "").strip()
    if own_file and env.get("NCCL_DEBUG", "").strip().upper() in ("INFO", "TRACE"):
        return NcclCapture(pattern=own_file, source="NCCL_DEBUG_FILE")
    if own_file:
        return NcclCapture(unavailable=f"the trainer's NCCL_DEBUG is {env.get('NCCL_DEBUG') or 'unset'}, not INFO: "
                                       f"its NCCL_DEBUG_FILE holds no INFO lines")
    return NcclCapture(unavailable=UNAVAILABLE_IN_PROCESS)


def read(capture: NcclCapture, host: str = "") -> tuple[NcclAccount | None, str]:
    """This process's account from its file, or None and why not. Never raises."""
    if capture.unavailable or not capture.pattern:
        return None, capture.unavailable or "no NCCL log was asked for"
    path = capture.path()
    try:
        result = read_log_file(path)
    except OSError as exc:
        return None, f"NCCL wrote no log to {path[:160]} ({exc.strerror or type(exc).__name__})"
    mine = [a for a in result.accounts if a.pid == os.getpid()] or result.accounts
    if not mine:
        return None, f"{path[:160]}: no NCCL line in it ({result.lines} line(s))"
    account = mine[0]
    account.source = capture.source
    if host:
        account.host = host  # the run's name for this host (NCCL prints gethostname()'s)
    return account, ""


def relay(capture: NcclCapture, out: TextIO | None = None) -> int:
    """Print on stdout what the job's own NCCL_DEBUG would have printed there (NCCL's default destination).

    INFO: every line; WARN: the WARN lines; VERSION: the version banner; unset: nothing. Bounded as
    the parser is (MAX_READ_BYTES); the number of lines printed."""
    level = capture.relay_level
    if capture.source != "captured" or level not in ("VERSION", "WARN", "INFO", "TRACE"):
        return 0
    out = out or sys.stdout
    printed = 0
    try:
        with open(capture.path(), "rb") as handle:
            data = handle.read(MAX_READ_BYTES)
    except OSError:
        return 0
    for raw in data.splitlines(keepends=True):
        line = raw[: MAX_LINE + 1].decode("utf-8", "replace")
        if level not in ("INFO", "TRACE"):
            if " NCCL INFO NCCL version " in line:  # at VERSION / WARN NCCL prints the bare banner
                line = line.split(" NCCL INFO ", 1)[1]
            elif level != "WARN" or " NCCL WARN " not in line:
                continue
        out.write(line if line.endswith("\n") else line + "\n")
        printed += 1
    out.flush()
    return printed


def close(capture: NcclCapture, environ: MutableMapping[str, str] | None = None) -> None:
    """Put the job's own NCCL variables back and remove preflight's folder."""
    env = os.environ if environ is None else environ
    for name, value in capture.saved.items():
        if value is None:
            env.pop(name, None)
        else:
            env[name] = value
    capture.saved = {}
    if capture.folder:
        shutil.rmtree(capture.folder, ignore_errors=True)
        capture.folder = ""
