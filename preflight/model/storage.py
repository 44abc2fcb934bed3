"""The storage family's data: what crosses the store, rank 0's judgement, the report's section.

Messages (keys in channel/keys.py, `storage/...`): `StoragePlan` (rank 0 -> every rank: the
per-run directory and the nonce file rank 0 wrote there), `StorageVisit` (a rank -> rank 0:
what it found at PATH, its mount, room), `StorageRound` (rank 0 -> every rank: who writes in
pass i), `StorageWrote` / `StorageRead` (a rank's timed write and read-back), `StorageReads`
(rank 0 -> readers: whose file each reads). Judgement (rank 0 -> checks/storage.py):
`NotShared`, `MountsDiffer`, `SlowOptions`, `Room`, `Corrupt`, `SlowStorage`, `BelowExpected`,
`StorageFailed`. Report: `StorageSection` with one `StorageHost` row per host.
"""

from __future__ import annotations

from msgspec import Struct, field


class MountView(Struct):
    """What PATH is on one rank, from /proc/self/mountinfo: the mount holding it."""

    mount_point: str = ""
    fs_type: str = ""
    source: str = ""
    root: str = ""  # the directory of the source mounted at mount_point ("/" for a whole filesystem)
    options: list[str] = field(default_factory=list)  # per-mount and superblock options, sorted

    def where(self) -> str:
        """`nfs4 server:/ckpt at /ckpt`, `ext4 /dev/vda[/tmp/private] at /ckpt` (a bind mount's directory)."""
        if not self.fs_type:
            return "unknown mount"
        sub = f"[{self.root}]" if self.root not in ("", "/") else ""
        return f"{self.fs_type} {self.source}{sub} at {self.mount_point}"

    def filesystem(self) -> str:
        """What two hosts must share to be one filesystem: type, source and the directory mounted."""
        return f"{self.fs_type} {self.source}{self.root if self.root not in ('', '/') else ''}"


# -- messages ---------------------------------------------------------------------------------
class StoragePlan(Struct):
    """`storage/plan`: rank 0's per-run directory under PATH, the nonce it wrote there, each rank's share."""

    directory: str
    nonce: str
    share_bytes: int


class StorageVisit(Struct):
    """`storage/visit/<rank>`: what a rank found at PATH."""

    rank: int
    host: str
    sees: bool  # read exactly this run's nonce in rank 0's file
    seen: str = ""  # what it found instead: "no such file", another nonce, an error
    mount: MountView = field(default_factory=MountView)
    free_bytes: int = 0
    free_inodes: int = 0
    total_bytes: int = 0
    error: str = ""  # PATH itself failed here (statvfs, mountinfo)


class StorageRound(Struct):
    """`storage/round/<i>`: the ranks that write in pass i (every rank that sees PATH, then the
    suspects and a reference host), or done: leave, removing what you wrote."""

    index: int
    writers: list[int] = field(default_factory=list)
    done: bool = False


class StorageWrote(Struct):
    """`storage/<i>/w/<rank>`: one rank's timed write of its share (write, fsync) in pass i."""

    rank: int
    path: str = ""
    nbytes: int = 0
    seconds: float = 0.0
    digest: str = ""  # sha256 of what it wrote
    error: str = ""


class StorageReads(Struct):
    """`storage/<i>/read`: reader rank -> the writer rank whose file it reads back ([reader, writer] pairs)."""

    pairs: list[list[int]] = field(default_factory=list)


class StorageRead(Struct):
    """`storage/<i>/r/<rank>`: one rank's timed read-back of another host's file."""

    rank: int
    writer: int
    nbytes: int = 0
    seconds: float = 0.0
    digest: str = ""  # sha256 of what it read
    error: str = ""
    method: str = ""  # "O_DIRECT", or "buffered, page cache dropped" where the filesystem refuses O_DIRECT


# -- rank 0's judgement, handed to checks/storage.py -----------------------------------------
class NotShared(Struct):
    """A host whose PATH is not the directory rank 0 wrote into."""

    host: str
    ranks: list[int]
    path: str
    seen: str
    mount: MountView
    others: list[str]  # the mounts the hosts that see it have (where())
    others_hosts: int = 0


class MountsDiffer(Struct):
    """Hosts that see the same directory through different filesystem types, sources or options."""

    path: str
    what: str  # "type and source" | "options"
    by_value: dict[str, list[str]]  # value -> hosts


class SlowOptions(Struct):
    """Mount options that make every save slow (sync, noac, ...), and the hosts that have them."""

    path: str
    options: list[str]
    hosts: list[str]


class Room(Struct):
    """Free bytes or inodes on PATH against one checkpoint (times the headroom)."""

    path: str
    kind: str  # "bytes" | "inodes"
    free: int
    needed: int  # for one checkpoint
    headroom: float
    hosts: list[str]


class Corrupt(Struct):
    """A read-back whose checksum is not what its writer wrote."""

    path: str
    writer_host: str
    writer_rank: int
    reader_host: str
    reader_rank: int
    written: str
    read: str


class SlowStorage(Struct):
    """A host whose write or read rate is below the ratio of its siblings' median in both passes."""

    host: str
    figure: str  # "write" | "read"
    passes: list[float]  # GB/s, first and confirming pass
    siblings_passes: list[float]  # the siblings' median (first pass), the reference host (second)
    ratio: float


class BelowExpected(Struct):
    """A host's write or read rate below 0.9 x `--expect storage_<figure>`."""

    host: str
    figure: str
    value: float
    expected: float


class StorageFailed(Struct):
    """A rank where PATH failed mid-run (a write, fsync, read or removal raised, or no answer)."""

    host: str
    rank: int
    why: str


# -- the report's section ---------------------------------------------------------------------
class StorageHost(Struct):
    """One host's row: its mount, what it saw, its rates (first pass; the second where measured again)."""

    host: str
    ranks: list[int] = field(default_factory=list)
    mount: MountView = field(default_factory=MountView)
    sees: bool = True
    blind_ranks: list[int] = field(default_factory=list)  # its ranks that did not see rank 0's file
    write_gbps: float | None = None
    read_gbps: float | None = None
    write_again_gbps: float | None = None
    read_again_gbps: float | None = None
    free_bytes: int = 0
    free_inodes: int = 0
    error: str = ""

    def figure(self, name: str) -> float | None:
        """`write` or `read`: the rate that counts (the confirming pass's where there was one)."""
        again = self.write_again_gbps if name == "write" else self.read_again_gbps
        return again if again is not None else (self.write_gbps if name == "write" else self.read_gbps)


class StorageSection(Struct):
    """The storage family in the JobReport: per host, the job's aggregate, one save and restore projected."""

    path: str
    share_bytes: int = 0  # what each rank wrote per pass
    checkpoint_size: int | None = None
    headroom: float = 2.0
    hosts: list[StorageHost] = field(default_factory=list)
    write_gbps: float | None = None  # the job's aggregate: every rank's bytes over the slowest rank's time
    read_gbps: float | None = None
    save_s: float | None = None  # checkpoint_size at the aggregate rate
    restore_s: float | None = None
    passes: int = 0
    seconds: float = 0.0  # the family's wall time on rank 0
    # How the read-back got past caches: the methods the reads used and whose files they read, e.g.
    # "O_DIRECT; each rank read a file another host wrote".
    read_back: str = ""
