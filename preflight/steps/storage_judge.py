"""Rank 0's judgement of the storage family (steps/storage.py): pure functions of what the ranks sent.

Per host: did its ranks see rank 0's nonce file (else NotShared), which mount holds PATH there,
the free bytes and inodes, and its write and read rates per pass (its ranks' bytes over their
longest time, since they run at once). Across hosts: one filesystem everywhere (type, source,
the directory mounted; and the options), options that slow every save, room for a checkpoint
with headroom, read-backs whose checksum differs, hosts below SLOW_RATIO of their siblings'
median in pass 0 and of the reference host when each is measured alone, and hosts below 0.9 x
`--expect storage_write/storage_read`. The findings are checks/storage.py's.
"""

from __future__ import annotations

import statistics
from collections import Counter, defaultdict
from collections.abc import Iterable

from preflight.checks import storage as checks
from preflight.lib.mountinfo import slow_options
from preflight.lib.storage_options import HEADROOM, StorageOptions
from preflight.model.findings import Finding
from preflight.model.storage import (
    BelowExpected,
    Corrupt,
    MountsDiffer,
    NotShared,
    Room,
    SlowOptions,
    SlowStorage,
    StorageFailed,
    StorageHost,
    StoragePlan,
    StorageRead,
    StorageSection,
    StorageVisit,
    StorageWrote,
)

MAX_ALONE = 4  # suspects measured again alone, the slowest first: more is the filesystem, not a host
ALONE_REPEATS = 2  # each of them and the reference, interleaved; the best of its passes alone counts
# Pass 0 every rank at once; then the reference host alone, then each suspect alone: one host at a time,
# so no host's fsync carries another's data (a journal commit flushes every writer's: whoever fsyncs
# first pays for all, which made a healthy host look slow beside another in one pass).
MAX_PASSES = 1 + ALONE_REPEATS * (1 + MAX_ALONE)
# A host is slow below half its siblings' median, in both passes. Not --straggler-ratio (0.8):
# the ranks of one filesystem share it, so a save's rates scatter more than a link's, and the
# fault this looks for (a degraded client, a sync mount, a throttled path) costs several times.
SLOW_RATIO = 0.5
# And its time alone at least this much longer than the reference's for the same bytes: a shorter gap
# is within a loaded host's scheduling noise (a descheduled writer loses slices of 10 ms), which on a
# fast path and a small share is most of the measurement (4 MiB in 2 ms vs 6 ms named a healthy host).
MIN_EXTRA_S = 0.05
EXPECT_RATIO = 0.9  # below 0.9 x --expect is an error, as for the collectives
FIGURES = ("write", "read")


class Judge:
    """What rank 0 knows of the family as it goes: visits, then each pass's writes and reads."""

    def __init__(self, options: StorageOptions, plan: StoragePlan, rank_hosts: dict[int, str],
                 visits: dict[int, StorageVisit], ratio: float = SLOW_RATIO) -> None:
        self.options, self.plan, self.rank_hosts, self.visits, self.ratio = options, plan, rank_hosts, visits, ratio
        for rank, v in visits.items():  # a rank speaks for its own host only: the one the exchange knows it on
            v.host = rank_hosts.get(rank, v.host)
        self.hosts = list(dict.fromkeys(rank_hosts[r] for r in sorted(rank_hosts)))  # job order
        self.failed: list[StorageFailed] = [StorageFailed(h, r, "no answer from this rank about PATH in time")
                                            for r, h in sorted(rank_hosts.items()) if r not in visits]
        self.failed += [StorageFailed(v.host, r, v.error) for r, v in sorted(visits.items()) if v.error]
        self.corrupt: list[Corrupt] = []
        self.rates: list[dict[str, dict[str, float]]] = []  # per pass: figure -> host -> GB/s
        self.totals: list[dict[str, tuple[int, float]]] = []  # per pass: figure -> (bytes, longest seconds)
        self.passes = 0
        self.read_methods: set[str] = set()  # how the reads got past caches (storage.read_back)
        self.read_across: set[bool] = set()  # whether each read's file was another host's (pass 0)
        self.alone_own = False  # a host measured again alone read its own host's files
        self.confirm: list[str] = []  # the reference host, then the suspects: measured alone, in this order

    def host_of(self, rank: int) -> str:
        return self.rank_hosts.get(rank, "?")

    def first_writers(self) -> list[int]:
        """Pass 0: every rank that saw rank 0's file (and could say where PATH is)."""
        return [r for r, v in sorted(self.visits.items()) if v.sees and not v.error]

    def pairs(self, index: int, wrote: dict[int, StorageWrote]) -> list[tuple[int, int]]:
        """Reader -> writer: each rank that wrote reads a file written on the next host (job order),
        so its own page cache cannot answer; on a single host, the next rank's."""
        ok = [r for r, w in sorted(wrote.items()) if not w.error]
        by_host: dict[str, list[int]] = defaultdict(list)
        for rank in ok:
            by_host[self.host_of(rank)].append(rank)
        hosts = [h for h in self.hosts if h in by_host]
        pairs = []
        for position, host in enumerate(hosts):
            if len(hosts) > 1:
                others = by_host[hosts[(position + 1) % len(hosts)]]
                pairs += [(rank, others[i % len(others)]) for i, rank in enumerate(by_host[host])]
            else:
                mine = by_host[host]
                pairs += [(rank, mine[(i + 1) % len(mine)]) for i, rank in enumerate(mine)]
        return pairs

    def add_pass(self, index: int, wrote: dict[int, StorageWrote], read: dict[int, StorageRead]) -> list[int]:
        """Record pass `index`; the writers of the next pass (the confirming one), or [] when done."""
        self.passes = index + 1
        asked = self._asked(index)
        for rank in asked:
            w = wrote.get(rank)
            if w is None:
                self.failed.append(StorageFailed(self.host_of(rank), rank, f"no write reported in pass {index}"))
            elif w.error:
                self.failed.append(StorageFailed(self.host_of(rank), rank, w.error))
        for rank, r in sorted(read.items()):
            if r.error:
                self.failed.append(StorageFailed(self.host_of(rank), rank, r.error))
                continue
            w = wrote.get(r.writer)
            if w is not None and r.digest != w.digest:
                self.corrupt.append(Corrupt(w.path, self.host_of(r.writer), r.writer, self.host_of(rank), rank,
                                            w.digest[:16], r.digest[:16]))
        good_reads = {rank: r for rank, r in read.items() if not r.error}
        self.read_methods.update(r.method or "unknown" for r in good_reads.values())
        if index == 0:  # the pass every rank takes part in: the restart's own pattern (later passes: one host alone)
            self.read_across.update(self.host_of(r.writer) != self.host_of(rank) for rank, r in good_reads.items())
        else:
            self.alone_own |= any(self.host_of(r.writer) == self.host_of(rank) for rank, r in good_reads.items())
        samples = {"write": [(rank, w.nbytes, w.seconds) for rank, w in wrote.items() if not w.error],
                   "read": [(rank, r.nbytes, r.seconds) for rank, r in good_reads.items()]}
        rates: dict[str, dict[str, float]] = {}
        totals: dict[str, tuple[int, float]] = {}
        for figure, rows in samples.items():
            per_host: dict[str, list[tuple[int, float]]] = defaultdict(list)
            for rank, nbytes, seconds in rows:
                per_host[self.host_of(rank)].append((nbytes, seconds))
            rates[figure] = {host: rate for host, xs in per_host.items()
                             if (rate := _gbps(sum(b for b, _ in xs), max(s for _, s in xs))) is not None}
            totals[figure] = (sum(b for _, b, _ in rows), max((s for _, _, s in rows), default=0.0))
        self.rates.append(rates)
        self.totals.append(totals)
        if index > 0 or self.corrupt:
            return self._ranks_of(self.confirm[index]) if index < len(self.confirm) else []
        suspects = {h for figure in FIGURES for h in self._suspects(rates[figure])}
        reference = self._reference(rates, suspects) if suspects else None
        if reference is None:
            return []
        # The slowest suspects first (by their worse figure against the median), at most MAX_ALONE of them.
        worst = sorted(suspects, key=lambda h: min(rates[f].get(h, 0.0) / max(statistics.median(
            [v for k, v in rates[f].items() if k != h] or [1.0]), 1e-12) for f in FIGURES))
        # Each measured alone twice, interleaved (reference, suspects, reference, suspects): its best counts,
        # since noise (a descheduled writer on a loaded host) only ever slows a measurement down.
        self.confirm = [reference, *worst[:MAX_ALONE]] * ALONE_REPEATS
        return self._ranks_of(reference)

    def _ranks_of(self, host: str) -> list[int]:
        return [r for r in self.first_writers() if self.host_of(r) == host]

    def _asked(self, index: int) -> list[int]:
        return self.first_writers() if index == 0 else self._ranks_of(self.confirm[index - 1])

    def _suspects(self, rates: dict[str, float]) -> list[str]:
        out = []
        for host, value in rates.items():
            others = [v for h, v in rates.items() if h != host]
            if others and value < self.ratio * statistics.median(others):
                out.append(host)
        return out

    def _reference(self, rates: dict[str, dict[str, float]], suspects: set[str]) -> str | None:
        """The known-good host: the fastest writer among those no figure suspects."""
        good = [h for h in rates["write"] if h not in suspects and h in rates["read"]]
        return max(good, key=lambda h: (rates["write"][h], rates["read"][h]), default=None)

    def alone(self, figure: str, host: str) -> float | None:
        """The host's best `figure` over the passes it was measured alone in (None: never)."""
        rates = [self.rates[i + 1][figure].get(host) for i, h in enumerate(self.confirm)
                 if h == host and i + 1 < len(self.rates)]
        return max((r for r in rates if r is not None), default=None)

    def slow(self) -> list[SlowStorage]:
        """Hosts below the ratio in pass 0 (against their siblings' median) and alone (their best alone against
        the reference host's best alone)."""
        out = []
        if not self.confirm:
            return out
        reference = self.confirm[0]
        for host in dict.fromkeys(self.confirm[1:]):
            if host == reference:
                continue
            for figure in FIGURES:
                first = self.rates[0][figure]
                others = [v for h, v in first.items() if h != host]
                again, ref = self.alone(figure, host), self.alone(figure, reference)
                if host not in first or again is None or ref is None or not others:
                    continue  # not measured again: never named
                median = statistics.median(others)
                # Seconds this host's bytes took alone beyond what the reference's rate takes for them.
                nbytes = self.plan.share_bytes * len(self._ranks_of(host))
                extra = nbytes / (again * 1e9) - nbytes / (ref * 1e9)
                if first[host] < self.ratio * median and again < self.ratio * ref and extra >= MIN_EXTRA_S:
                    out.append(SlowStorage(host, figure, [first[host], again], [median, ref], self.ratio))
        return out

    def not_shared(self) -> list[NotShared]:
        """Ranks that did not read rank 0's nonce, one per host and what it has at PATH."""
        seers = [v for v in self.visits.values() if v.sees]
        others = sorted({v.mount.where() for v in seers})
        groups: dict[tuple[str, str, str], list[int]] = defaultdict(list)
        for rank, v in sorted(self.visits.items()):
            if not v.sees:
                groups[(v.host, v.mount.where(), v.seen)].append(rank)
        by_where = {v.mount.where(): v.mount for v in self.visits.values()}
        return [NotShared(host, ranks, self.options.path, seen, by_where[where], others,
                          len({v.host for v in seers}))
                for (host, where, seen), ranks in groups.items()]

    def differ(self) -> list[MountsDiffer]:
        """Among the ranks that see the same directory: filesystems or options that differ by host."""
        out = []
        seers = [v for v in self.visits.values() if v.sees and not v.error]
        for what, key in (("type and source", lambda v: v.mount.filesystem()),
                          ("options", lambda v: ",".join(v.mount.options) or "(none)")):
            by_value: dict[str, set[str]] = defaultdict(set)
            for v in seers:
                by_value[key(v)].add(v.host)
            if len(by_value) > 1:
                out.append(MountsDiffer(self.options.path, what, {k: sorted(v) for k, v in by_value.items()}))
        return out

    def slow_mounts(self) -> list[SlowOptions]:
        by_options: dict[tuple[str, ...], set[str]] = defaultdict(set)
        for v in self.visits.values():
            found = tuple(slow_options(v.mount))
            if found and v.sees:
                by_options[found].add(v.host)
        return [SlowOptions(self.options.path, list(opts), sorted(hosts)) for opts, hosts in by_options.items()]

    def room(self) -> list[Room]:
        """Free bytes (with --checkpoint-size) and inodes on the shared filesystem, its tightest view."""
        seers = [v for v in self.visits.values() if v.sees and not v.error]
        if not seers:
            return []
        hosts = sorted({v.host for v in seers})
        out = []
        if self.options.checkpoint_size is not None:
            free = min(v.free_bytes for v in seers)
            if free < HEADROOM * self.options.checkpoint_size:
                out.append(Room(self.options.path, "bytes", free, self.options.checkpoint_size, HEADROOM, hosts))
        limited = [v.free_inodes for v in seers if v.free_inodes >= 0]
        needed = len(self.rank_hosts) + 1  # torch.distributed.checkpoint: a file per rank and .metadata
        if limited and min(limited) < HEADROOM * needed:
            out.append(Room(self.options.path, "inodes", min(limited), needed, HEADROOM, hosts))
        return out

    def below_expected(self) -> list[BelowExpected]:
        out = []
        for figure, expected in (("write", self.options.expect_write), ("read", self.options.expect_read)):
            if expected is None or not self.rates:
                continue
            for host in self.hosts:
                value = self._counted(figure, host)
                if value is not None and value < EXPECT_RATIO * expected:
                    out.append(BelowExpected(host, figure, value, expected))
        return out

    def _counted(self, figure: str, host: str) -> float | None:
        """The host's best alone where it was measured alone, else its pass-0 rate."""
        alone = self.alone(figure, host)
        return alone if alone is not None else (self.rates[0][figure].get(host) if self.rates else None)

    def findings(self) -> list[Finding]:
        """Every finding of the family, through its checks."""
        out: list[Finding] = []
        for item in self.not_shared():
            out += checks.not_shared.report(item)
        for differ in self.differ():
            out += checks.mounts_differ.report(differ)
        for slow_mount in self.slow_mounts():
            out += checks.slow_mount_options.report(slow_mount)
        for room in self.room():
            out += (checks.no_room if room.kind == "bytes" else checks.no_inodes).report(room)
        for corrupt in self.corrupt:
            out += checks.read_back_differs.report(corrupt)
        for slow in self.slow():
            out += checks.slow_storage.report(slow)
        for below in self.below_expected():
            out += checks.below_expected.report(below)
        for failed in _unique(self.failed):
            out += checks.storage_failed.report(failed)
        return out

    def read_back(self) -> str:
        """How the reads got past caches, for the report ("" when nothing was read)."""
        return _read_back_text(self.read_methods, self.read_across, self.alone_own)

    def section(self, seconds: float) -> StorageSection:
        """The report's section: a row per host, the job's aggregate, one save and one restore projected."""
        rows = []
        for host in self.hosts:
            mine = [v for r, v in sorted(self.visits.items()) if v.host == host]
            common = Counter(v.mount.where() for v in mine).most_common(1)
            mount = next((v.mount for v in mine if common and v.mount.where() == common[0][0]), None)
            row = StorageHost(host=host, ranks=[r for r, h in sorted(self.rank_hosts.items()) if h == host],
                              sees=all(v.sees for v in mine) and bool(mine),
                              blind_ranks=[v.rank for v in mine if not v.sees],
                              free_bytes=min((v.free_bytes for v in mine), default=0),
                              free_inodes=min((v.free_inodes for v in mine), default=0),
                              error="; ".join(f"rank {f.rank}: {f.why}" for f in _unique(self.failed)
                                              if f.host == host))
            if mount is not None:
                row.mount = mount
            if self.rates:
                row.write_gbps, row.read_gbps = self.rates[0]["write"].get(host), self.rates[0]["read"].get(host)
            row.write_again_gbps, row.read_again_gbps = self.alone("write", host), self.alone("read", host)
            rows.append(row)
        out = StorageSection(path=self.options.path, share_bytes=self.plan.share_bytes,
                             checkpoint_size=self.options.checkpoint_size, headroom=HEADROOM, hosts=rows,
                             passes=self.passes, seconds=seconds, read_back=self.read_back())
        if self.totals:
            out.write_gbps = _gbps(*self.totals[0]["write"])
            out.read_gbps = _gbps(*self.totals[0]["read"])
            size = self.options.checkpoint_size
            if size is not None:
                out.save_s = size / (out.write_gbps * 1e9) if out.write_gbps else None
                out.restore_s = size / (out.read_gbps * 1e9) if out.read_gbps else None
        return out


def _read_back_text(methods: set[str], across: set[bool], alone_own: bool = False) -> str:
    """How the reads got past caches, and whose files they read: in pass 0, where every rank reads (the
    restart's pattern), and, said apart, in the passes that measure one host alone (no other host writes
    then, so it reads its own)."""
    if not methods:
        return ""
    whose = ("each rank read a file another host wrote" if across == {True} else
             "one host: each rank read a file another rank of it wrote (a cache shared on the host may answer)"
             if across == {False} else "some ranks read another host's file, some their own host's")
    again = "; a host measured again alone read its own files" if alone_own and across == {True} else ""
    return f"{' and '.join(sorted(methods))}; {whose}{again}"


def could_not_start(path: str, host: str, why: str) -> list[Finding]:
    """Rank 0 could not start or lead the family (no store, its directory under PATH): it could not run."""
    return checks.storage_failed.report(StorageFailed(host, 0, f"{path}: {why}"))


def _gbps(nbytes: int, seconds: float) -> float | None:
    return nbytes / seconds / 1e9 if seconds > 0 and nbytes > 0 else None


def _unique(failed: Iterable[StorageFailed]) -> list[StorageFailed]:
    seen, out = set(), []
    for f in failed:
        if (f.host, f.rank, f.why) not in seen:
            seen.add((f.host, f.rank, f.why))
            out.append(f)
    return out
