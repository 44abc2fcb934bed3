"""env:// ranks forked from one interpreter that has already imported torch and preflight.

Why: an env:// rank is `python -m preflight ...` and its interpreter spends ~1.1-1.8 s of CPU
importing torch before it runs a line of preflight; the suite starts hundreds of them on two
cores, so those imports were most of its CPU. `preflight launch` meets the same cost the same
way (its forkserver imports once and forks its ranks: commands/forkserver_warm.py); here each
pytest worker has one such interpreter, the zygote, and `start_rank` asks it for a rank.

What the rank is: a fork of the zygote (a single-threaded process that imported torch.distributed
and what a rank of `preflight launch` preloads), which takes the test's pipes as its stdout and
stderr, /dev/null as stdin, the test's cwd, exactly the environment start_rank built, then runs
`python -m preflight ARGS`'s main module (runpy) and leaves with its exit code after the exit
hooks, as an interpreter would. A real process: its own pid, signals, store connections, gloo
process groups. The test holds a `subprocess.Popen` (ZygoteRank) whose wait and poll read the
exit status the zygote reaped; everything else (communicate, kill, send_signal) is Popen's own.

A rank on a fake host is forked by the same zygote and then enters the host: its `ulimit -l` and
cgroup, then the network, UTS and mount namespaces of the host's anchor (a `sleep` started on the host,
which holds them: `FakeHost.entry` in tests/helpers/hosts.py), before the rank's first line. The
host's ranks share one set of namespaces, as a real host's processes do, and no host pays a torch
import of its own (a zygote per fake host did: ~150 interpreters a suite run, ~400 CPU-s of 1,300).
Entering a mount namespace needs root; elsewhere a fake host's ranks are exec'd on the host.

A planted rank (tests/helpers/ranks.plant_env: a sitecustomize.py on PYTHONPATH) is forked too:
its PYTHONPATH is the zygote's with entries in front, which the child puts on sys.path; it then
runs the plant as an interpreter runs sitecustomize at start, and imports preflight afresh after
it (the zygote's preflight modules are dropped from the child), as an exec'd rank does: a plant
that replaces a function (`dist.all_to_all_single`, a method of preflight's) is in place before
any preflight module binds it. What differs from an exec'd rank is only that torch was imported
before the plant ran, where a plant imports torch itself anyway.

A Python script (`python SCRIPT.py ARGS`: a training script as env:// ranks, a test's forger of
store values, a benchmark's smoke run) is forked the same way and run as `python SCRIPT.py` runs it:
`runpy.run_path` as `__main__`, with its folder first on sys.path, then PYTHONPATH's entries (not
the zygote's own first two), and `sys.argv` the script and its arguments.

What it cannot be, and so `start_rank` execs a fresh interpreter instead (`forkable`): a rank
under a wrapper (`taskset`), running a program that is not a Python script (`-m
torch.distributed.run`, a shell script), or whose environment
differs from the zygote's in anything else read when an interpreter or torch starts (PYTHON*
other than entries added in front of PYTHONPATH, LD_*, malloc and OpenMP settings, torch's C++
logging).
"""

from __future__ import annotations

import atexit
import importlib
import json
import os
import runpy
import selectors
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import traceback
from collections.abc import Mapping, Sequence
from typing import Any

import psutil

# Read when an interpreter, its allocator, OpenMP or torch's C++ side starts: the zygote read its
# own once, so a rank that needs other values must start as an interpreter of its own.
_READ_AT_START = ("PYTHON", "LD_", "MALLOC", "GLIBC_TUNABLES", "OMP_", "KMP_", "TORCH_CPP_", "TORCH_SHOW_CPP")
_MESSAGE = 64 * 1024


def _start_values(env: Mapping[str, str]) -> dict[str, str]:
    """What `env` sets that an interpreter reads at start, less PYTHONPATH (see added_path)."""
    return {k: v for k, v in env.items() if k.startswith(_READ_AT_START) and k != "PYTHONPATH"}


def added_path(env: Mapping[str, str], zygote_env: Mapping[str, str]) -> list[str] | None:
    """The PYTHONPATH entries `env` has in front of the zygote's ([] for none), or None when its
    PYTHONPATH is not the zygote's with entries in front (an entry taken away, or reordered)."""
    mine, theirs = (_entries(e.get("PYTHONPATH", "")) for e in (env, zygote_env))
    front = len(mine) - len(theirs)
    return mine[:front] if front >= 0 and mine[front:] == theirs else None


def _entries(path: str) -> list[str]:
    return [entry for entry in path.split(os.pathsep) if entry]


def forkable(argv: Sequence[str], env: Mapping[str, str], zygote_env: Mapping[str, str]) -> bool:
    """Whether `argv` (`python -m preflight ...` or `python SCRIPT.py ...`) in `env` can be forked from a
    zygote started in `zygote_env`."""
    return (len(argv) >= 2 and argv[0] == sys.executable and (_is_preflight(argv) or _script(argv) is not None)
            and _start_values(env) == _start_values(zygote_env) and added_path(env, zygote_env) is not None)


def _is_preflight(argv: Sequence[str]) -> bool:
    return list(argv[1:3]) == ["-m", "preflight"]


def _script(argv: Sequence[str]) -> str | None:
    """The Python script `argv` runs (`python SCRIPT.py ...`, the file there), or None."""
    return argv[1] if argv[1].endswith(".py") and os.path.isfile(argv[1]) else None


# -- the zygote (its own process) -------------------------------------------------------------

def _start_as_planted(front: list[str], at: int) -> None:
    """In the child: PYTHONPATH's entries in front of the zygote's go on sys.path (from index `at`),
    preflight's modules are dropped (imported afresh, after the plant), and a sitecustomize.py among them
    runs as an interpreter runs it at start (an error in it is one line on stderr, and the rank goes on)."""
    sys.path[at:at] = front
    for name in [m for m in sys.modules if m == "preflight" or m.startswith("preflight.")]:
        del sys.modules[name]
    if not any(os.path.exists(os.path.join(entry, "sitecustomize.py")) for entry in front):
        return
    sys.modules.pop("sitecustomize", None)
    try:
        importlib.import_module("sitecustomize")
    except Exception as exc:  # what site.execsitecustomize prints
        print(f"Error in sitecustomize; set PYTHONVERBOSE for traceback:\n{type(exc).__name__}: {exc}",
              file=sys.stderr)


def _run_rank(argv: Sequence[str], env: Mapping[str, str], cwd: str) -> int:
    """In the forked child: become `python -m preflight ARGV[3:]` (or `python SCRIPT ARGV[2:]`) and
    return its exit code."""
    front = added_path(env, os.environ) or []  # os.environ is still the zygote's here
    os.chdir(cwd)
    os.environ.clear()
    os.environ.update(env)
    script = None if _is_preflight(argv) else _script(argv)
    code: int = 0
    try:
        if script is None:
            sys.argv = ["-m", *argv[3:]]
            if front:
                _start_as_planted(front, 0)
            runpy.run_module("preflight", run_name="__main__", alter_sys=True)
        else:
            # What `python SCRIPT` has on sys.path: the script's folder first, then PYTHONPATH's entries;
            # not the two the zygote's `-c` start put first (the repository's root and '').
            sys.path[0:2] = [os.path.dirname(os.path.realpath(script))]
            sys.argv = [script, *argv[2:]]
            if front:
                _start_as_planted(front, 1)
            runpy.run_path(script, run_name="__main__")
    except SystemExit as stop:
        if stop.code is None or isinstance(stop.code, int):
            code = stop.code or 0
        else:
            print(stop.code, file=sys.stderr)
            code = 1
    except BaseException:  # what an interpreter would print before exiting 1
        traceback.print_exc()
        code = 1
    atexit._run_exitfuncs()  # an interpreter runs them at exit; os._exit below does not
    return code


# setns(2)/unshare(2) flags (linux/sched.h); Python 3.11's os has no setns.
_NAMESPACES = {"net": 0x40000000, "uts": 0x04000000, "mnt": 0x00020000}


def _enter(host: Mapping[str, Any]) -> None:
    """In the forked child: take the host's memlock limit, join its cgroup, then its anchor's namespaces
    (mount last: it moves the root and cwd; /sys/fs/cgroup is hidden inside)."""
    import ctypes
    import resource

    if host.get("memlock_kib") is not None:  # what `ulimit -l` sets: soft and hard
        limit = int(host["memlock_kib"]) * 1024
        resource.setrlimit(resource.RLIMIT_MEMLOCK, (limit, limit))
    if host.get("cgroup"):
        with open(os.path.join(host["cgroup"], "cgroup.procs"), "w") as procs:
            procs.write(str(os.getpid()))
    libc = ctypes.CDLL(None, use_errno=True)
    anchor = int(host["anchor"])
    for name, flag in _NAMESPACES.items():
        fd = os.open(f"/proc/{anchor}/ns/{name}", os.O_RDONLY | os.O_CLOEXEC)
        try:
            if libc.setns(fd, flag) != 0:
                raise OSError(ctypes.get_errno(), f"setns into pid {anchor}'s {name} namespace")
        finally:
            os.close(fd)


def _child(conn: socket.socket, wakeup: int, request: dict[str, Any], fds: list[int]) -> None:
    conn.close()
    os.close(wakeup)
    signal.set_wakeup_fd(-1)
    signal.signal(signal.SIGCHLD, signal.SIG_DFL)
    devnull = os.open(os.devnull, os.O_RDONLY)
    for fd, target in ((devnull, 0), (fds[0], 1), (fds[1], 2)):
        os.dup2(fd, target)
    for fd in (devnull, *fds):
        os.close(fd)
    code = 1
    try:
        if request.get("host"):
            _enter(request["host"])
        code = _run_rank(request["argv"], request["env"], request["cwd"])
    finally:
        for stream in (sys.stdout, sys.stderr):
            try:
                stream.flush()
            except (OSError, ValueError):
                pass
        os._exit(code)


def _send(conn: socket.socket, message: dict[str, Any]) -> None:
    try:
        conn.send(json.dumps(message).encode())
    except OSError:
        pass  # the test process is gone: nobody is left to tell


def serve(fd: int) -> None:
    """The zygote's loop: fork a rank per request on socket `fd`, report each child's exit status."""
    conn = socket.socket(fileno=fd)
    import torch.distributed  # noqa: F401  (the cost every rank would pay)

    import preflight.commands.cli
    import preflight.commands.forkserver_warm  # noqa: F401
    wake_read, wake_write = os.pipe()
    os.set_blocking(wake_write, False)
    signal.set_wakeup_fd(wake_write)
    signal.signal(signal.SIGCHLD, lambda *_: None)
    selector = selectors.DefaultSelector()
    selector.register(conn, selectors.EVENT_READ)
    selector.register(wake_read, selectors.EVENT_READ)
    _send(conn, {"ready": os.getpid()})
    while True:
        for key, _ in selector.select():
            if key.fileobj is conn:
                try:
                    data, fds, _, _ = socket.recv_fds(conn, _MESSAGE, 3)
                except OSError:
                    data, fds = b"", []
                if not data:
                    return  # the test process closed its end: it is gone
                try:  # the request comes as a file: an environment can be larger than a socket message
                    with os.fdopen(fds.pop(0), "rb") as request_file:
                        request = json.loads(request_file.read())
                except (OSError, ValueError, IndexError) as exc:
                    for f in fds:
                        os.close(f)
                    _send(conn, {"failed": f"{type(exc).__name__}: {exc}"})
                    continue
                sys.stdout.flush()
                sys.stderr.flush()
                pid = os.fork()
                if pid == 0:
                    _child(conn, wake_read, request, fds)
                for f in fds:
                    os.close(f)
                _send(conn, {"started": pid})
            else:
                os.read(wake_read, 4096)
        while True:  # reap every child that ended, whichever signal woke us
            try:
                pid, status = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                break
            if pid == 0:
                break
            _send(conn, {"exited": pid, "code": os.waitstatus_to_exitcode(status)})


# -- the test process's side -------------------------------------------------------------------

class Zygote:
    """One zygote per test process, started on first use; its children's exits are collected as they come."""

    def __init__(self, env: Mapping[str, str]) -> None:
        self.env = dict(env)
        self.owner = os.getpid()
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
        code = (f"import sys; sys.path.insert(0, {root!r}); "
                f"from tests.helpers.zygote import serve; serve({theirs.fileno()})")
        self.process = subprocess.Popen([sys.executable, "-c", code], env=self.env, pass_fds=[theirs.fileno()],
                                        stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL)
        theirs.close()
        self._conn = ours
        self._lock = threading.Lock()
        self._exits: dict[int, int] = {}
        self.gone = False
        with self._lock:
            self._read(timeout=300, until=lambda m: "ready" in m)
        if self.gone:
            raise RuntimeError(f"the test zygote (pid {self.process.pid}) ended before it was ready")

    def _read(self, timeout: float | None, until: Any = None) -> dict[str, Any] | None:
        """Read messages (lock held) for up to `timeout` s, until one satisfies `until`; file exits."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            remaining = None if deadline is None else max(0.0, deadline - time.monotonic())
            self._conn.settimeout(remaining)
            try:
                data = self._conn.recv(_MESSAGE)
            except (TimeoutError, BlockingIOError):
                return None
            if not data:  # the zygote is gone (a host's is killed with the host): no more exits to read
                self.gone = True
                return None
            message = json.loads(data)
            if "exited" in message:
                self._exits[message["exited"]] = message["code"]
            elif "started" in message:
                # A pid the kernel reused (pid_max is 32,768 here; a CI run forks thousands): the exit
                # recorded under it is an earlier child's, never this one's, whose exit comes after.
                self._exits.pop(message["started"], None)
            if until is not None and until(message):
                return message

    def start(self, argv: Sequence[str], env: Mapping[str, str], stdout: int, stderr: int,
              cwd: str | None = None, host: Mapping[str, Any] | None = None) -> int:
        """Fork a rank running `argv` in `env` with these output fds, in `cwd` (None: this process's), on
        `host` (FakeHost.entry: the child enters it first; None: this machine as it is); its pid."""
        with tempfile.TemporaryFile() as request:
            where = os.fspath(cwd or os.getcwd())
            request.write(json.dumps({"argv": list(argv), "env": dict(env), "cwd": where,
                                      "host": dict(host) if host else None}).encode())
            request.seek(0)
            with self._lock:
                socket.send_fds(self._conn, [b"fork"], [request.fileno(), stdout, stderr])
                reply = self._read(timeout=120, until=lambda m: "started" in m or "failed" in m)
        if reply is None or "failed" in reply:
            raise RuntimeError(f"the test zygote did not fork a rank: {reply or 'no answer within 120 s'}")
        return int(reply["started"])

    def exit_code(self, pid: int, timeout: float | None) -> int | None:
        """The rank's exit code, waiting up to `timeout` s (0: do not wait; None: for ever)."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while pid not in self._exits:
            if self.gone:  # its orphans were reaped by init: only "gone" is known, not how
                if psutil.pid_exists(pid):
                    if deadline is not None and time.monotonic() >= deadline:
                        return None
                    time.sleep(0.05)
                    continue
                self._exits[pid] = -signal.SIGKILL
                break
            remaining = None if deadline is None else deadline - time.monotonic()
            if remaining is not None and remaining <= 0:
                # Collect what has already arrived before saying "still running".
                with self._lock:
                    self._read(timeout=0)
                return self._exits.get(pid)
            with self._lock:
                if pid in self._exits or self.gone:
                    continue
                self._read(timeout=min(0.2, remaining) if remaining is not None else 0.2,
                           until=lambda m: m.get("exited") == pid)
        return self._exits[pid]


_zygotes: dict[int, Zygote] = {}


def zygote(env: Mapping[str, str]) -> Zygote:
    """This test process's zygote (one per process; a fork of pytest gets its own); a rank it forks for
    a fake host enters the host itself (Zygote.start's `host`)."""
    if os.getpid() not in _zygotes:
        _zygotes[os.getpid()] = Zygote(env)
    return _zygotes[os.getpid()]


class ZygoteRank(subprocess.Popen):
    """A rank forked by the zygote, held as a Popen: the pipes and signals are Popen's; the exit
    status comes from the zygote, which is the rank's parent and reaps it."""

    def __init__(self, argv: Sequence[str], *, zygote: Zygote, env: Mapping[str, str],
                 host: Mapping[str, Any] | None = None, **kwargs: Any) -> None:
        self._zygote, self._host = zygote, host
        super().__init__(list(argv), env=dict(env), **kwargs)

    def _execute_child(self, args: Any, executable: Any, preexec_fn: Any, close_fds: Any, pass_fds: Any, cwd: Any,
                       env: Any, startupinfo: Any, creationflags: Any, shell: Any, p2cread: int, p2cwrite: int,
                       c2pread: int, c2pwrite: int, errread: int, errwrite: int, *rest: Any) -> None:
        try:
            self.pid = self._zygote.start(args, env, c2pwrite, errwrite, cwd, self._host)
            self._child_created = True
        finally:
            for fd in (c2pwrite, errwrite, p2cread):
                if fd != -1:
                    os.close(fd)

    def _internal_poll(self, _deadstate: Any = None, *_: Any, **__: Any) -> int | None:
        if self.returncode is None:
            self.returncode = self._zygote.exit_code(self.pid, 0)
        return self.returncode

    def _wait(self, timeout: float | None) -> int:
        if self.returncode is None:
            code = self._zygote.exit_code(self.pid, timeout)
            if code is None:
                raise subprocess.TimeoutExpired(self.args, timeout or 0)
            self.returncode = code
        return self.returncode
