"""The storage family: is `--storage PATH` one shared filesystem with room and speed for a checkpoint?

It runs after reachability (step 5) and before the cross checks, so its errors stop the probes
like any other. Led by rank 0 through the store (keys `storage/...`, channel/keys.py), every
rank taking part:

1. Rank 0 makes this run's own directory under PATH (`.preflight-storage-<nonce>`, the run's
   nonce agreed in step 4) with a file `nonce` holding the nonce, and publishes the plan.
2. Every rank reads that file through its own PATH and sends what it found (exactly the nonce,
   nothing, something else), the mount holding PATH (/proc/self/mountinfo: ranks of one host
   can live in different mount namespaces) and the free bytes and inodes (`StorageVisit`).
3. Pass 0: every rank that saw the nonce writes its share at once (`StoragePlan.share_bytes`:
   the checkpoint's size over the world, capped by `--storage-budget`; random bytes, so no
   compressing or deduplicating filesystem can shortcut them), fsyncs, and drops the file from
   its page cache; then each reads back a file another host wrote (with O_DIRECT where the
   filesystem takes it, else with its page cache dropped first, so a local cache cannot answer;
   the report says which) and checksums it. Rates per host: its ranks' bytes over their
   longest time.
4. Confirm before blame (as the bandwidth probes do, probes/confirm.py): hosts below half
   their siblings' median in pass 0 are measured again alone, one host per pass, after the
   fastest other host alone as a known-good reference, twice, interleaved (alone: on a
   journaling filesystem one host's fsync commits the others' data too; twice: noise only
   ever slows a measurement down, so each host's best alone counts); only a host whose best
   alone is below half the reference's, and 50 ms longer for its bytes, is named.
5. Rank 0 says done; each rank removes what it wrote, and rank 0 the run's directory, also on
   SIGTERM (the `finally`s). A stale directory of another run has another nonce: never touched.

Rank 0's judgement is steps/storage_judge.py; the findings are checks/storage.py's.
"""

from __future__ import annotations

import errno
import hashlib
import mmap
import os
import secrets
import shutil
import threading
import time
from collections.abc import Callable
from typing import Any

from msgspec import Struct, field

from preflight.channel import keys
from preflight.channel.board import Board
from preflight.checks import storage as storage_checks
from preflight.lib.mountinfo import mount_of
from preflight.lib.storage_options import StorageOptions
from preflight.lib.waiting import wait_until
from preflight.model.findings import CheckOutcome, Finding
from preflight.model.storage import (
    StoragePlan,
    StorageRead,
    StorageReads,
    StorageRound,
    StorageSection,
    StorageVisit,
    StorageWrote,
)
from preflight.options import RunOptions
from preflight.registry import Tags
from preflight.steps import storage_judge

DIR_PREFIX = ".preflight-storage-"
NONCE_FILE = "nonce"
CHUNK = 4 * 2**20  # bytes per write / read call
WAIT_MARGIN_S = 30.0  # a follower waits for rank 0's next message this long beyond the run's --timeout


class StorageOutcome(Struct):
    """Rank 0's result of the family: the report's section and the findings."""

    section: StorageSection | None = None
    findings: list[Finding] = field(default_factory=list)

    def outcomes(self) -> list[CheckOutcome]:
        """One outcome per storage check (its worst finding, OK when none), for JUnit and the counts."""
        return [check.outcome(self.findings) for check in storage_checks.ALL_CHECKS]


def enabled(options: RunOptions) -> bool:
    """The family runs with --storage (or PREFLIGHT_STORAGE), unless `--skip storage` or an `--only` without it."""
    if options.storage is None or Tags.STORAGE in options.skip:
        return False
    return not options.only or Tags.STORAGE in options.only


def run_lead(store: Any, rank_hosts: dict[int, str], nonce: str, options: RunOptions) -> StorageOutcome:
    """Rank 0's part in the run (runner.py): lead the family, or say why it could not run."""
    assert options.storage is not None
    host = rank_hosts.get(0, "")
    if store is None:
        return StorageOutcome(findings=storage_judge.could_not_start(
            options.storage.path, host, "no store: the ranks cannot coordinate"))
    # The run's nonce where the exchange agreed one; inside a job (preflight.check) a fresh one: either
    # way this run's own, which no stale directory under PATH can carry.
    nonce = nonce or secrets.token_hex(8)
    try:
        return lead(store, rank_hosts, nonce, options.storage, options.timeouts.run_s)
    except Exception as exc:  # the store failed under rank 0: release the others, never a pass
        try:
            Board(store).put(keys.STORAGE_PLAN.key, StoragePlan(directory="", nonce=nonce, share_bytes=0))
        except Exception:  # the store is gone: the followers' waits end at their deadline
            pass
        return StorageOutcome(findings=storage_judge.could_not_start(options.storage.path, host,
                                                                    f"{type(exc).__name__}: {exc}"[:200]))


def release(store: Any, nonce: str) -> None:
    """Rank 0 leads no storage family this run (the ranks disagree on their options, RUN011): a rank
    started with --storage stops waiting for the plan at once instead of at its deadline."""
    if store is None:
        return
    try:
        Board(store).put(keys.STORAGE_PLAN.key, StoragePlan(directory="", nonce=nonce or secrets.token_hex(8),
                                                            share_bytes=0))
    except Exception:  # the store is gone: the followers' waits end at their deadline
        pass


# -- what every rank does ------------------------------------------------------------------------
def visit(rank: int, host: str, root: str, plan: StoragePlan) -> StorageVisit:
    """Read rank 0's nonce file through this rank's PATH; say what PATH is here."""
    seen = ""
    try:
        with open(os.path.join(root, plan.directory, NONCE_FILE), encoding="ascii", errors="replace") as handle:
            found = handle.read(256).strip()
        seen = "" if found == plan.nonce else f"another run's nonce {found[:16]!r}"
    except FileNotFoundError:
        seen = "no such file: another directory than rank 0's"
    except OSError as exc:
        seen = f"cannot read it: {exc.strerror or exc}"
    out = StorageVisit(rank=rank, host=host, sees=not seen, seen=seen)
    try:
        out.mount = mount_of(root)
        stats = os.statvfs(root)
        out.free_bytes, out.total_bytes = stats.f_bavail * stats.f_frsize, stats.f_blocks * stats.f_frsize
        out.free_inodes = stats.f_favail if stats.f_files else -1  # -1: no inode limit (btrfs, some NFS)
    except OSError as exc:
        out.error = f"{root}: {exc.strerror or exc}"
    return out


def share_path(root: str, plan: StoragePlan, rank: int, index: int) -> str:
    """Where `rank` writes its share in pass `index`."""
    return os.path.join(root, plan.directory, f"r{rank}.p{index}")


def write_share(path: str, rank: int, nbytes: int) -> StorageWrote:
    """Write `nbytes` of random data to `path` and fsync, timed; then drop it from this host's page cache."""
    data = os.urandom(nbytes)
    digest = hashlib.sha256(data).hexdigest()
    try:
        started = time.perf_counter()
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        try:
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view[:CHUNK]):]
            os.fsync(fd)
        finally:
            os.close(fd)
        seconds = time.perf_counter() - started
        _drop_cache(path)
    except OSError as exc:
        return StorageWrote(rank=rank, path=path, nbytes=nbytes, error=f"write {path}: {exc.strerror or exc}")
    return StorageWrote(rank=rank, path=path, nbytes=nbytes, seconds=seconds, digest=digest)


DIRECT = "O_DIRECT"
DROPPED = "buffered, page cache dropped"


def read_back(path: str, rank: int, writer: int) -> StorageRead:
    """Read `path` (another host's file), timed and checksummed, past every cache this host can bypass:
    O_DIRECT where the filesystem takes it (no page cache at all, and on NFS / Lustre / GPFS no client
    cache), else buffered with this host's page cache of it dropped first. The read says which."""
    digest = hashlib.sha256()
    try:
        started = time.perf_counter()
        nbytes, method = _read_direct(path, digest)
        if nbytes is None:  # the filesystem refuses O_DIRECT (tmpfs, some FUSE): buffered, cache dropped
            digest = hashlib.sha256()
            nbytes, method = _read_buffered(path, digest), DROPPED
        seconds = time.perf_counter() - started
    except OSError as exc:
        return StorageRead(rank=rank, writer=writer, error=f"read {path}: {exc.strerror or exc}")
    return StorageRead(rank=rank, writer=writer, nbytes=nbytes, seconds=seconds, digest=digest.hexdigest(),
                       method=method)


def _read_direct(path: str, digest: Any) -> tuple[int | None, str]:
    """(bytes read, DIRECT) with O_DIRECT into a page-aligned buffer; (None, "") where it is refused."""
    flag = getattr(os, "O_DIRECT", 0)
    if not flag:
        return None, ""
    try:
        fd = os.open(path, os.O_RDONLY | flag)
    except OSError as exc:
        if exc.errno == errno.EINVAL:
            return None, ""
        raise
    nbytes = 0
    try:
        with mmap.mmap(-1, CHUNK) as buffer:  # page-aligned, as O_DIRECT asks
            while True:
                try:
                    got = os.readv(fd, [buffer])
                except OSError as exc:
                    if exc.errno == errno.EINVAL and nbytes == 0:  # opened, but reads refused
                        return None, ""
                    raise
                if not got:
                    break
                digest.update(buffer[:got])
                nbytes += got
    finally:
        os.close(fd)
    return nbytes, DIRECT


def _read_buffered(path: str, digest: Any) -> int:
    nbytes = 0
    fd = os.open(path, os.O_RDONLY)
    try:
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        while chunk := os.read(fd, CHUNK):
            digest.update(chunk)
            nbytes += len(chunk)
    finally:
        os.close(fd)
    return nbytes


def _drop_cache(path: str) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
    finally:
        os.close(fd)


def _remove(paths: list[str]) -> None:
    while paths:
        try:
            os.unlink(paths.pop())
        except OSError:
            pass  # gone already (rank 0 removed the directory), or the path failed: nothing more to do


def take_part(store: Any, rank: int, host: str, options: StorageOptions, timeout_s: float) -> None:
    """Every rank (rank 0 in a thread): visit, then write and read in each pass rank 0 announces; remove
    what it wrote once rank 0 says done, or on the way out whatever happens (SIGTERM included).

    A store that fails (rank 0 gone) ends this rank's part: the verdict's wait reports that."""
    try:
        _take_part(store, rank, host, options, timeout_s)
    except (RuntimeError, OSError):
        return


def _take_part(store: Any, rank: int, host: str, options: StorageOptions, timeout_s: float) -> None:
    board = Board(store)
    wait_s = timeout_s + WAIT_MARGIN_S
    plan = board.wait(keys.STORAGE_PLAN.key, 0, wait_s)
    if not isinstance(plan, StoragePlan) or not plan.directory:
        return  # rank 0 could not make its directory (a finding there), or is gone
    written: list[str] = []
    try:
        board.put(keys.STORAGE_VISIT.at(rank), visit(rank, host, options.path, plan))
        # One more than the passes: the last round is always rank 0's done, after every read of the last
        # pass is in (a rank that left after its own read would remove a file another rank still reads).
        for index in range(storage_judge.MAX_PASSES + 1):
            step = board.wait(keys.STORAGE_ROUND.at(index), 0, wait_s)
            if not isinstance(step, StorageRound) or step.done:
                return
            _remove(written)  # the previous pass's file: every read of it is in
            if rank in step.writers:
                _start_together(board, index, len(step.writers), timeout_s)
                wrote = write_share(share_path(options.path, plan, rank, index), rank, plan.share_bytes)
                written.append(wrote.path)
                board.put(keys.STORAGE_WROTE.at(index, rank), wrote)
            reads = board.wait(keys.STORAGE_READS.at(index), 0, wait_s)
            writer = _writer_for(reads, rank)
            if writer is not None:
                board.put(keys.STORAGE_READ.at(index, rank),
                          read_back(share_path(options.path, plan, writer, index), rank, writer))
    finally:
        _remove(written)


def _start_together(board: Board, index: int, writers: int, timeout_s: float) -> None:
    """Writers of one pass start within a few ms of each other: a save is every rank writing at once."""
    key = keys.STORAGE_READY.at(index)
    board.count(key)
    wait_until(lambda: board.count(key, 0) >= writers, min(timeout_s, 10.0), max_poll_s=0.005)


def _writer_for(reads: Any, rank: int) -> int | None:
    if not isinstance(reads, StorageReads):
        return None
    for pair in reads.pairs:
        if len(pair) == 2 and pair[0] == rank:
            return int(pair[1])
    return None


# -- rank 0 ----------------------------------------------------------------------------------------
class RunDirectory:
    """This run's directory under PATH: made by rank 0, removed by rank 0, never another run's."""

    def __init__(self, root: str, nonce: str) -> None:
        self.name = DIR_PREFIX + "".join(c for c in nonce if c.isalnum())[:64]
        self.path = os.path.join(root, self.name)

    def make(self, nonce: str) -> None:
        """The directory and its nonce file (written whole, fsynced: every rank reads it next). A directory
        whose nonce could not be written (a full disk, a quota) is removed before the error goes up: it
        is this run's, and nothing else would ever remove it."""
        os.mkdir(self.path, 0o755)
        try:
            with open(os.path.join(self.path, NONCE_FILE), "w", encoding="ascii") as handle:
                handle.write(nonce + "\n")
                handle.flush()
                os.fsync(handle.fileno())
        except BaseException:
            self.remove()
            raise

    def remove(self) -> None:
        """Remove this run's directory and everything in it (what a rank left is removed with it)."""
        shutil.rmtree(self.path, ignore_errors=True)


def lead(store: Any, rank_hosts: dict[int, str], nonce: str, options: StorageOptions, timeout_s: float,
         ratio: float = storage_judge.SLOW_RATIO, clock: Callable[[], float] = time.monotonic) -> StorageOutcome:
    """Rank 0: lead the family over the ranks that reported (rank -> host); the section and the findings."""
    started = clock()
    board = Board(store)
    world = len(rank_hosts)
    run_dir = RunDirectory(options.path, nonce)
    try:
        run_dir.make(nonce)
    except OSError as exc:
        board.put(keys.STORAGE_PLAN.key, StoragePlan(directory="", nonce=nonce, share_bytes=0))
        return StorageOutcome(findings=storage_judge.could_not_start(
            options.path, rank_hosts.get(0, ""), f"cannot make this run's directory {run_dir.name}: "
            f"{exc.strerror or exc}"))
    plan = StoragePlan(directory=run_dir.name, nonce=nonce, share_bytes=options.share(world))
    own = threading.Thread(target=_own_part, args=(store, rank_hosts.get(0, ""), options, timeout_s),
                           daemon=True, name="storage-rank0")
    try:
        board.put(keys.STORAGE_PLAN.key, plan)
        own.start()
        ranks = sorted(rank_hosts)
        visits = _gather(board, [keys.STORAGE_VISIT.at(r) for r in ranks], ranks, StorageVisit, timeout_s)
        judge = storage_judge.Judge(options, plan, rank_hosts, visits, ratio)
        writers = judge.first_writers()
        for index in range(storage_judge.MAX_PASSES):
            if not writers:
                break
            board.put(keys.STORAGE_ROUND.at(index), StorageRound(index=index, writers=writers))
            wrote = _gather(board, [keys.STORAGE_WROTE.at(index, r) for r in writers], writers, StorageWrote,
                            timeout_s)
            pairs = judge.pairs(index, wrote)
            board.put(keys.STORAGE_READS.at(index), StorageReads(pairs=[list(p) for p in pairs]))
            readers = [reader for reader, _ in pairs]
            read = _gather(board, [keys.STORAGE_READ.at(index, r) for r in readers], readers, StorageRead,
                           timeout_s)
            writers = judge.add_pass(index, wrote, read)
        board.put(keys.STORAGE_ROUND.at(judge.passes), StorageRound(index=judge.passes, done=True))
        own.join(timeout=min(timeout_s, 10.0))
        section = judge.section(seconds=clock() - started)
        return StorageOutcome(section=section, findings=judge.findings())
    finally:
        run_dir.remove()


def _own_part(store: Any, host: str, options: StorageOptions, timeout_s: float) -> None:
    try:
        _take_part(store, 0, host, options, timeout_s)
    except Exception:  # rank 0's own part failing shows as its missing visit, write or read
        pass


def _gather(board: Board, names: list[keys.Key[Any]], ranks: list[int], into: type[Any], timeout_s: float
            ) -> dict[int, Any]:
    """Each rank's value under its key, waited for together (bounded); a rank without one is absent."""
    wait_until(lambda: board.has_all(names) if names else True, timeout_s)
    values = board.fetch(names, ranks)
    return {rank: value for rank, value in zip(ranks, values, strict=True) if isinstance(value, into)}
