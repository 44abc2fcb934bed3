"""Turns among one job's processes on one host (the GPUs behind one PCIe switch copying to the host one at
a time), through a lock file that belongs to this user and this job alone and is gone after each turn.

A node is shared: by the user's next job, by another user's job. A lock file left in /tmp by one run
(0644, owned by its user) would refuse every other user's open with PermissionError, on every later run.
So the file's name carries the user's uid and a digest of the job's identity, it is created 0600 and
never followed through a symlink, and the holder removes it at the end of its turn while it still holds
the lock. A waiter that then wakes on the removed file sees that the name no longer leads to the file it
locked, and opens the name again (the usual lock-file-with-unlink protocol), so two processes never
hold turns on two different files of one name.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import functools
import hashlib
import os
import tempfile
from collections.abc import Iterator

MAX_REOPENS = 10_000  # a name that keeps changing under us (never in practice): stop, never spin forever


def job_identity(job_id: str, master_addr: str, master_port: int) -> str:
    """What every rank of one job shares and no other job running now does: the launcher's job id and the
    job's rendezvous address (two runs of one Slurm job step in turn; two jobs never share a rendezvous)."""
    return f"{job_id}|{master_addr}:{master_port}"


@functools.cache
def machine_id(proc_root: str = "/proc") -> str:
    """The running kernel's boot id: the same for every process of one machine, whatever its hostname
    (containers and network namespaces have their own), and different on every other machine; "" when
    unreadable. What names one CPU, its cores, caches and memory, shared by everything on the machine."""
    try:  # bytes: no codec lookup (a process that became another uid may not be able to import one)
        with open(os.path.join(proc_root, "sys/kernel/random/boot_id"), "rb") as f:
            return f.read(64).decode("ascii", "replace").strip()
    except OSError:
        return ""


def turn_path(host: str, resource: str, job: str, directory: str | None = None) -> str:
    """The lock file of `resource` on `host` for this user's job `job` (a name safe in any directory)."""
    digest = hashlib.sha256(job.encode("utf-8", "surrogatepass")).hexdigest()[:12]
    label = "".join(c if c.isalnum() or c in "-_." else "_" for c in f"{host}-{resource}")[:120]
    return os.path.join(directory or tempfile.gettempdir(), f"preflight-pcie-u{os.geteuid()}-{digest}-{label}.lock")


def _open_locked(path: str) -> int:
    """A descriptor of the file now at `path`, locked exclusively (waits for the holder's turn to end)."""
    for _ in range(MAX_REOPENS):
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            held = os.fstat(fd)
            if held.st_uid != os.geteuid():  # someone else's file under our name (a squatter in /tmp)
                raise PermissionError(errno.EACCES, f"{path} belongs to uid {held.st_uid}, not to this user")
            try:
                named = os.stat(path, follow_symlinks=False)
            except FileNotFoundError:
                named = None
            if named is not None and (named.st_dev, named.st_ino) == (held.st_dev, held.st_ino):
                return fd
        except BaseException:
            os.close(fd)
            raise
        os.close(fd)  # the holder removed it while we waited: take a turn on the name's new file
    raise OSError(errno.EAGAIN, f"{path} kept changing while waiting for a turn")


@contextlib.contextmanager
def turn(path: str) -> Iterator[None]:
    """The block run while this process alone holds `path`'s turn; the file is removed when the turn ends."""
    fd = _open_locked(path)
    try:
        yield
    finally:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(path)  # still locked: nobody holds a turn on this file now, and waiters will reopen
        os.close(fd)  # closing releases the lock
