"""The checkpoint path (`--storage PATH`): one shared filesystem everywhere, with room and speed for a save.

Engine-scope checks: the storage family (preflight/steps/storage.py) has every rank visit,
write and read back under PATH, and rank 0 judges (steps/storage_judge.py); these turn what it
found into findings. Every finding names the host, and PATH as that host has it (filesystem
type, source and the directory mounted, from /proc/self/mountinfo).
"""

from __future__ import annotations

from collections.abc import Iterable

from msgspec import Struct

from preflight.lib.hostlist import ranks_text
from preflight.lib.numbers import json_numbers
from preflight.lib.storage_options import HEADROOM
from preflight.lib.units import count, human_bytes, percent
from preflight.model import Finding, Severity
from preflight.model.storage import (
    BelowExpected,
    Corrupt,
    MountsDiffer,
    NotShared,
    Room,
    SlowOptions,
    SlowStorage,
    StorageFailed,
)
from preflight.registry import Grade, Problem, Tags, engine_check


@engine_check(
    "STO001",
    tag=Tags.STORAGE,
    severity=Severity.ERROR,
    hint="Mount the shared checkpoint filesystem at PATH on the named host (check its fstab / automount, and that "
    "the container or job step bind-mounts it), or drain the host: a save there goes to a disk nobody restarts from.",
    blames_host=True,
)
def not_shared(item: NotShared) -> Iterable[Problem]:
    """Shared visibility: a rank does not see the file rank 0 wrote under PATH.

    Rank 0 makes this run's directory under PATH with a file holding the run's nonce; every rank
    reads it through its own PATH. A rank that finds nothing, or something else, writes its
    checkpoint somewhere no other host (and no restart) will look: a local directory instead of
    the shared mount, another export, a stale automount, a container without the bind mount.
    The finding names the host and its ranks (ranks of one host can live in different mount
    namespaces), with the mount that holds PATH there next to what the others have.
    """
    others = "; ".join(item.others) or "none"
    yield Problem(
        f"{item.host} ({ranks_text(item.ranks)}): {item.path} is not the directory rank 0 wrote into ({item.seen}); "
        f"there it is {item.mount.where()}; the {item.others_hosts} host(s) that see it have: {others}",
        ranks=item.ranks, hosts=[item.host],
        data={"path": item.path, "seen": item.seen, "mount": item.mount.where(), "fs_type": item.mount.fs_type,
              "source": item.mount.source, "others": item.others})


@engine_check(
    "STO002",
    tag=Tags.STORAGE,
    severity=Severity.WARN,
    hint="Mount the checkpoint path the same way on every host (one export, one fstab line): a host on another "
    "filesystem or with other options saves at another speed, or somewhere else.",
)
def mounts_differ(differ: MountsDiffer) -> Iterable[Problem]:
    """Same filesystem everywhere: hosts see PATH through different types, sources or mount options.

    Among the ranks that see rank 0's file, the mount holding PATH is compared across hosts:
    its type and source with the directory mounted (`nfs4 server:/ckpt` vs `ext4 /dev/nvme0n1p1`),
    then its options. They all reach the same files, but not the same way: a host whose
    client mounts another export, a different protocol version or other caching saves and
    restores at its own speed.
    """
    parts = "; ".join(f"{value}: {', '.join(hosts)}" for value, hosts in sorted(differ.by_value.items(),
                                                                                key=lambda kv: -len(kv[1])))
    hosts = sorted({h for hs in differ.by_value.values() for h in hs})
    yield Problem(f"{differ.path}: the mount's {differ.what} differ by host: {parts}", hosts=hosts,
                  data={"path": differ.path, "what": differ.what, "by_value": differ.by_value})


@engine_check(
    "STO003",
    tag=Tags.STORAGE,
    severity=Severity.WARN,
    hint="Remount without them unless they are meant (sync: every write waits for the disk; noac / actimeo=0 / "
    "lookupcache=none: every stat and open goes to the NFS server).",
)
def slow_mount_options(slow: SlowOptions) -> Iterable[Problem]:
    """Mount options that make every save slow: sync, dirsync, noac, actimeo=0, lookupcache=none.

    Read from the mount holding PATH on each host. A checkpoint is many large writes and many
    small metadata operations: synchronous writes or attribute caching turned off make each of
    them a round trip to the disk or the server.
    """
    yield Problem(f"{slow.path} is mounted with {', '.join(slow.options)} on {', '.join(slow.hosts)}",
                  hosts=slow.hosts, data={"path": slow.path, "options": slow.options})


def _room_problem(room: Room, shown: str, needed: str, free: str) -> Problem:
    short = room.free < room.needed
    why = ("less than one checkpoint: the next save fails" if short
           else f"less than {room.headroom:g} checkpoints: the previous one cannot be kept while the next is written")
    return Problem(f"{room.path}: {free} free, {why} ({needed} {shown}, headroom {room.headroom:g}x)",
                   hosts=room.hosts, severity=Severity.ERROR if short else Severity.WARN,
                   data={"path": room.path, "free": room.free, "needed": room.needed, "headroom": room.headroom})


@engine_check(
    "STO004",
    tag=Tags.STORAGE,
    severity=Severity.ERROR,
    grades=(Grade(Severity.WARN, f"there is room for one checkpoint but not for {HEADROOM:g} (--checkpoint-size "
                  f"x {HEADROOM:g})"),),
    hint="Free space on the checkpoint filesystem (old checkpoints, other jobs' files) or point --storage and the "
    "training's checkpoint directory to a filesystem with room for two checkpoints.",
)
def no_room(room: Room) -> Iterable[Problem]:
    """Room: free bytes on PATH against --checkpoint-size, with headroom for the previous checkpoint.

    statvfs(PATH)'s bytes available to this user, the lowest any host sees. Below one
    checkpoint is an error (the save fails part-way, often after hours); below two (a save
    keeps the previous checkpoint until the new one is complete) a warning. Judged only with
    --checkpoint-size.
    """
    yield _room_problem(room, "for one checkpoint", human_bytes(room.needed), human_bytes(room.free))


@engine_check(
    "STO005",
    tag=Tags.STORAGE,
    severity=Severity.ERROR,
    grades=(Grade(Severity.WARN, f"there are inodes for one checkpoint but not for {HEADROOM:g}"),),
    hint="Free inodes on the checkpoint filesystem (remove old checkpoints' many small files) or use another one.",
)
def no_inodes(room: Room) -> Iterable[Problem]:
    """Room: free inodes on PATH against the files one checkpoint makes.

    torch.distributed.checkpoint writes a file per rank and a metadata file: world size + 1
    inodes per checkpoint. Below that is an error, below twice that a warning. A filesystem
    without an inode limit (statvfs reports none) is not judged.
    """
    yield _room_problem(room, "for one checkpoint of the world's files", f"{count(room.needed)} inodes",
                        f"{count(room.free)} inodes")


@engine_check(
    "STO006",
    tag=Tags.STORAGE,
    severity=Severity.ERROR,
    hint="Corruption on the checkpoint path: run the filesystem's and the network's diagnostics for the named "
    "hosts (client, NIC, server) before trusting a checkpoint written or read there.",
    blames_host=True,
)
def read_back_differs(corrupt: Corrupt) -> Iterable[Problem]:
    """A read-back differs from what was written: corruption on the checkpoint path.

    Each rank writes random bytes, fsyncs, and sends the sha256 of what it wrote; a rank on
    another host reads the file back (O_DIRECT, or its page cache dropped first) and sends the sha256 of what
    it read. A difference means the bytes changed between one host's write and another's read:
    the writer's client, the server or disk, or the reader's client. The writer's host is named
    (the bytes left it), the reader in the message.
    """
    yield Problem(
        f"{corrupt.path}: written by {corrupt.writer_host} (rank {corrupt.writer_rank}, sha256 {corrupt.written}...), "
        f"read back by {corrupt.reader_host} (rank {corrupt.reader_rank}) as sha256 {corrupt.read}...",
        ranks=[corrupt.writer_rank], hosts=[corrupt.writer_host],
        data={"path": corrupt.path, "writer_host": corrupt.writer_host, "reader_host": corrupt.reader_host,
              "writer_rank": corrupt.writer_rank, "reader_rank": corrupt.reader_rank})


@engine_check(
    "STO007",
    tag=Tags.STORAGE,
    severity=Severity.WARN,
    hint="Look at the named host's mount of the checkpoint path (client version and options, its NIC to the "
    "storage, a throttle or a degraded device): every synchronous save waits for the slowest host.",
)
def slow_storage(slow: SlowStorage) -> Iterable[Problem]:
    """A host writes or reads the checkpoint path far slower than its siblings, confirmed measured alone.

    Every rank writes its share at once and reads back another host's file; a host's rate is
    its ranks' bytes over their longest time. A host below half the median of the other hosts
    is a suspect, and is measured again alone, after the fastest other host alone (a
    known-good reference), twice, interleaved: it is named only when its best alone is below
    half the reference's best alone (noise on a loaded host only ever slows a measurement)
    and its bytes took at least 50 ms longer than at the reference's rate (a shorter gap is
    scheduling noise, not a save that waits).
    Half, not --straggler-ratio: ranks of one filesystem share it, and the faults this
    catches (a degraded client, a throttled path) cost several times. With one host there
    are no siblings to compare with.
    """
    passes = ", ".join(f"{v:.3g} vs {s:.3g}" for v, s in zip(slow.passes, slow.siblings_passes))
    yield Problem(
        f"{slow.host}: {slow.figure} {slow.passes[-1]:.3g} GB/s on the checkpoint path, "
        f"{percent(slow.passes[0] / slow.siblings_passes[0])} of the other hosts' median "
        f"(threshold {percent(slow.ratio)}; "
        f"below it in both passes, GB/s: {passes})",
        hosts=[slow.host],
        data={"figure": slow.figure, "passes": slow.passes, "siblings_passes": slow.siblings_passes,
              "ratio": slow.ratio, "value_gbps": slow.passes[-1]})


@engine_check(
    "STO008",
    tag=Tags.STORAGE,
    severity=Severity.ERROR,
    hint="The host's checkpoint path is slower than --expect storage_write / storage_read: see STO007's hint, "
    "or correct the expectation.",
    blames_host=True,
)
def below_expected(below: BelowExpected) -> Iterable[Problem]:
    """A host's write or read rate on the checkpoint path is below 0.9 x --expect storage_write / storage_read.

    The rate is per host (its ranks at once), from the confirming pass where the host was
    measured twice.
    """
    yield Problem(f"{below.host}: {below.figure} {below.value:.3g} GB/s on the checkpoint path, below 0.9 x the "
                  f"expected {below.expected:.3g} GB/s", hosts=[below.host],
                  data={"figure": below.figure, "value_gbps": below.value, "expected_gbps": below.expected})


@engine_check(
    "STO009",
    tag=Tags.STORAGE,
    severity=Severity.COULD_NOT_RUN,
    hint="See the reason: PATH failed on that host during the run (removed, unmounted, full, read-only, I/O "
    "error), or the rank did not answer in time.",
)
def storage_failed(failed: StorageFailed) -> Iterable[Problem]:
    """The storage family could not run on a rank: PATH failed mid-run, or the rank did not answer.

    Never a pass: a write, fsync, read or statvfs that raised, or a rank silent past --timeout.
    """
    yield Problem(f"{failed.host} (rank {failed.rank}): {failed.why}", ranks=[failed.rank],
                  hosts=[failed.host] if failed.host else [], data={"why": failed.why})


class SlowStorageFigures(Struct, frozen=True):
    """STO007 as the spare-node choice reads it: which figure (write or read) and the host's lowest
    fraction of its siblings' rate over the passes (None when the data has none)."""

    figure: str
    fraction: float | None


def slow_storage_figures(finding: Finding) -> SlowStorageFigures:
    """STO007's evidence, read back from what `slow_storage` writes into Finding.data."""
    passes, siblings = json_numbers(finding.data.get("passes")), json_numbers(finding.data.get("siblings_passes"))
    fraction = min((p / s for p, s in zip(passes, siblings) if s), default=None)
    figure = finding.data.get("figure")
    return SlowStorageFigures(figure if isinstance(figure, str) else "?", fraction)


ALL_CHECKS = (not_shared, mounts_differ, slow_mount_options, no_room, no_inodes, read_back_differs, slow_storage,
              below_expected, storage_failed)
