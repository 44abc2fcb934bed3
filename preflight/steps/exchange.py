"""Step 4 and the go / verdict hand-offs: every rank reports to rank 0.

The channel is torch.distributed's c10d TCPStore, the engine the training itself uses for
rendezvous. Rank 0 hosts it at MASTER_ADDR:MASTER_PORT, except under torchrun, whose agent
already hosts one there (TORCHELASTIC_USE_AGENT_STORE): then every rank joins that store as
torch's env:// rendezvous does. A shared directory (`--out-dir` on the cluster filesystem)
is the fallback when the store cannot form; rank 0 merges what it finds in both.

Keys live under `preflight/<run id>/`, so a stale run's keys are never read. Every wait has
a deadline; a rank that did not report is the caller's finding, never a hang.

Run identity: a run id is not unique (two env:// jobs without a job id are both `env`), so
the ranks also agree on a random nonce through the store, first writer wins (`agree_nonce`).
Every file a rank writes into --out-dir names it (`rank-<r>.<nonce>.json`; go and verdict
carry it inside), so a reused folder's files from an earlier run are never read as this
run's: rank 0 ignores them and says so (RUN009). A rank that could not reach the store has no
nonce and writes `rank-<r>.json`, which rank 0 accepts only when it was written after rank 0
itself started (minus a small clock skew).
"""

from __future__ import annotations

import dataclasses
import gc
import json
import os
import secrets
import socket
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import timedelta
from pathlib import Path
from typing import Any

from preflight.checks.run_findings import foreign_findings_dropped, unreadable_payload
from preflight.lib.errors import one_line
from preflight.lib.torch_import import quiet_cpp_logs
from preflight.lib.waiting import MAX_POLL_S, wait_until
from preflight.model import CheckOutcome, Finding, JobReport, RankFacts, World
from preflight.model.codec import BadPayload, decode, encode
from preflight.steps import run_auth
from preflight.steps.heartbeat import Heartbeat, Liveness
from preflight.steps.store_join import ForeignStore, join_store, mark_store, run_prefix
from preflight.steps.wire import RankPayload, SharedSections, from_wire, to_wire

MULTI_GET_CHUNK = 1024  # keys per multi_get
NONCE_KEY = "nonce"
CLOCK_SKEW_S = 5.0  # a nonce-less file written this long before rank 0 started may still be this run's


def follower_poll_s(world_size: int) -> float:
    """The longest pause between two looks at the store while waiting for rank 0: 0.2 s up to
    2,048 ranks, then growing with N to 2 s, so all followers together make at most ~8,000
    store calls per second (2 per look: the value and the heartbeat)."""
    return min(2.0, max(MAX_POLL_S, world_size / 8192))


@dataclass
class Collected:
    """What rank 0 received: payloads by rank, and how each arrived."""

    payloads: dict[int, RankPayload] = field(default_factory=dict)
    bad_payloads: dict[int, str] = field(default_factory=dict)  # rank -> why it was rejected
    duplicates: dict[int, list[str]] = field(default_factory=dict)  # rank -> hosts of every claimant
    stale_files: list[str] = field(default_factory=list)  # --out-dir files of another run, ignored
    shared: SharedSections = field(default_factory=SharedSections, repr=False)  # sections decoded once

    def merged_with(self, own: RankPayload) -> tuple[list[RankFacts], list[Finding], list[CheckOutcome]]:
        """Rank 0's own payload plus every peer's, by rank; an unreadable payload is a RUN002 finding."""
        payloads = {**self.payloads, own.rank: own}
        facts = [payloads[rank].facts for rank in sorted(payloads)]
        findings: list[Finding] = []
        for rank in sorted(payloads):
            if rank != own.rank:
                findings += own_findings_only(payloads[rank])
        outcomes = [o for rank in sorted(payloads) if rank != own.rank for o in payloads[rank].outcomes]
        for rank, reason in sorted(self.bad_payloads.items()):
            findings += unreadable_payload.report(rank=rank, reason=reason)
        return facts, findings, outcomes

    def missing(self, world_size: int, own_rank: int = 0) -> list[int]:
        """Ranks that never reported (never the collecting rank itself, even when its store failed)."""
        return [r for r in range(world_size)
                if r != own_rank and r not in self.payloads and r not in self.bad_payloads]


def own_findings_only(payload: RankPayload) -> list[Finding]:
    """A rank's findings that concern only its own rank and host; a RUN006 finding for any others.

    Its local checks judge only its own facts, so nothing it sends may blame another rank or
    host (which would otherwise reach the exclude list on one process's word).
    """
    rank, host = payload.rank, payload.facts.host
    kept: list[Finding] = []
    dropped: list[Finding] = []
    for finding in payload.findings:
        mine = set(finding.ranks) <= {rank} and set(finding.hosts) <= {host}
        (kept if mine else dropped).append(finding)
    if not dropped:
        return kept
    example = f"{dropped[0].check_id} on ranks {dropped[0].ranks[:4]} hosts {dropped[0].hosts[:4]}"
    return kept + foreign_findings_dropped.report(rank=rank, dropped=len(dropped), example=example[:200])


class Exchange:
    """Rank-to-rank-0 reporting over a TCPStore, with a shared-directory fallback."""

    def __init__(self, world: World, timeout_s: float, out_dir: str | None = None, job_store: Any = None) -> None:
        self.world = world
        self.timeout_s = timeout_s
        self.prefix = run_prefix(world)
        self.store: Any = None
        # The job's own store (preflight.check: its default process group's), used as it is:
        # no second port, and its timeout is the job's, left untouched.
        self.job_store = job_store
        self.store_error = ""  # why the store could not form, when it could not
        self.foreign = False  # MASTER_PORT answered, but not as this run's store
        self.out_dir = Path(out_dir, _safe(world.run_id)) if out_dir else None
        self.started = time.time()
        self.heartbeat: Heartbeat | None = None  # rank 0's, from lead_heartbeat()
        self.nonce = ""  # this run's identity, agreed through the store; "" without one
        self.secret = run_auth.run_secret()  # the launcher's per-run secret, if any (steps/run_auth.py)

    # -- forming the channel -------------------------------------------------------------

    def open(self) -> None:
        """Host or join the store. On failure, store_error says why and the dir is the channel."""
        if self.job_store is not None:
            from torch.distributed import PrefixStore

            self.store = PrefixStore(self.prefix, self.job_store)
            return
        # c10d prints a C++ stack trace per failed connection attempt; the failure is one line here.
        with quiet_cpp_logs():
            self._host_or_join()

    def _host_or_join(self) -> None:
        from torch.distributed import PrefixStore, TCPStore

        hosting = self.world.rank == 0 and not self.world.use_agent_store
        try:
            if hosting:
                # torch retries an unresolvable MASTER_ADDR for ~3x the timeout before it gives up.
                socket.getaddrinfo(self.world.master_addr, self.world.master_port, type=socket.SOCK_STREAM)
                store = TCPStore(
                    self.world.master_addr,
                    self.world.master_port,
                    None,
                    True,
                    timedelta(seconds=self.timeout_s),
                    wait_for_workers=False,
                )
                # Port 0 (single process) means "any free port": record the one we got.
                self.world.master_port = store.port
                mark_store(store, self.world)  # clients refuse a store another run marked
            else:
                # With a shared-dir fallback, give up on the store early enough that the dir
                # still reaches rank 0 before its own deadline.
                connect_s = self.timeout_s / 3 if self.out_dir is not None else self.timeout_s
                # Bounded: a bare TCPStore client hangs on a listener that is not a store.
                store = join_store(self.world, connect_s)
                store.set_timeout(timedelta(seconds=self.timeout_s))
            self.store = PrefixStore(self.prefix, store)
            self.nonce = agree_nonce(self.store)
        except Exception as exc:  # DistNetworkError, DistStoreError, RuntimeError: all mean "no store"
            self.store_error = _one_line(exc)
            self.foreign = isinstance(exc, ForeignStore)
            if self.out_dir is None:
                self.store_error += " (no --out-dir fallback was given)"

    # -- every rank ----------------------------------------------------------------------

    def publish(self, payload: RankPayload) -> None:
        """Send this rank's facts and findings to rank 0 (store and, if given, the dir)."""
        text = to_wire(payload)
        if self.out_dir is not None:
            _atomic_write(self.out_dir / _rank_file(self.world.rank, self.nonce), text)
        if self.store is not None:
            # A second process claiming the same rank leaves its host where rank 0 can find it.
            claim = self.store.add(f"claims/{self.world.rank}", 1)
            self.store.set(f"claimant/{self.world.rank}/{claim}", self.world.host)
            if claim == 1:
                if self.secret:  # before the payload: rank 0 reads both once the arrival is listed
                    self.store.set(f"auth/{self.world.rank}",
                                   run_auth.payload_proof(self.secret, self.nonce, self.world.rank, text))
                self.store.set(f"rank/{self.world.rank}", text)
                # The arrival list lets rank 0 fetch only new payloads: O(new ranks) per poll.
                self.store.append("arrivals", f"{self.world.rank},")
            self.store.add("reported", 1)

    def wait_for(self, name: str, timeout_s: float) -> dict[str, Any] | None:
        """Wait for a value rank 0 publishes (go, verdict); None when the deadline passes.

        The deadline is pushed on while rank 0's heartbeat advances (steps/heartbeat.py). The
        poll backs off to a ceiling that grows with N (`follower_poll_s`), so thousands of
        waiting ranks ask the store a bounded number of times per second. (The store's own
        server-side wait was tried: each wait that times out logs a c10d warning on every rank.)
        """
        if not self.has_channel():
            return None
        return wait_until(lambda: self._read_published(name), Liveness(self.store, timeout_s).time_left,
                          stop_if=lambda: not self.has_channel(), max_poll_s=follower_poll_s(self.world.world_size))

    def lead_heartbeat(self) -> Heartbeat:
        """Rank 0: beat while it works, so followers wait for it (stopped by announcing the verdict)."""
        self.heartbeat = Heartbeat(self.store, self.world.world_size).start()
        return self.heartbeat

    def has_channel(self) -> bool:
        """Whether anything can still arrive: a store, or a shared directory."""
        return self.store is not None or self.out_dir is not None

    def _read_published(self, name: str) -> dict[str, Any] | None:
        if self.store is not None:
            try:
                if self.store.check([name]):
                    value = json.loads(self.store.get(name))
                    if self._proven_decision(name, value):
                        return value
            except Exception:
                self.store = None  # rank 0 went away; the dir may still answer
        if self.out_dir is not None:
            path = self.out_dir / f"{name}.json"
            try:
                if path.stat().st_mtime >= self.started - 1:
                    value = json.loads(path.read_text())
                    # Knowing this run's nonce, a decision of another run (a reused folder) is not ours.
                    if (not self.nonce or value.get(NONCE_KEY) == self.nonce) and self._proven_decision(name, value):
                        return value
            except (OSError, ValueError, AttributeError):
                return None
        return None

    def _proven_decision(self, name: str, value: Any) -> bool:
        """Without a run secret, any decision; with one, only one whose proof holds (else a forgery, ignored)."""
        if not self.secret:
            return True
        if not isinstance(value, dict):
            return False
        unproven = {k: v for k, v in value.items() if k != run_auth.PROOF_KEY}
        return run_auth.valid(self.secret, value.get(run_auth.PROOF_KEY), name, json.dumps(unproven, sort_keys=True))

    def acknowledge(self) -> None:
        """Tell rank 0 this rank has read the verdict, so it may take the store down."""
        if self.store is not None:
            try:
                self.store.add("done", 1)
            except Exception:
                pass

    # -- rank 0 --------------------------------------------------------------------------

    def collect(self, timeout_s: float) -> Collected:
        """Wait until every rank reported or the deadline passed; never longer."""
        collected = Collected()
        size = self.world.world_size

        def everyone_reported() -> bool:
            self._take_from_store(collected)
            self._take_from_dir(collected)
            return len(collected.payloads) + len(collected.bad_payloads) >= size

        wait_until(everyone_reported, timeout_s, stop_if=lambda: not self.has_channel())
        self._find_duplicates(collected)
        self._note_stale(collected)
        return collected

    def _take_from_store(self, collected: Collected) -> None:
        if self.store is None or not self.store.check(["arrivals"]):
            return
        arrived = {int(r) for r in self.store.get("arrivals").decode().split(",") if r}
        new = sorted(r for r in arrived - collected.payloads.keys() - collected.bad_payloads.keys()
                     if 0 <= r < self.world.world_size)
        # In chunks: one multi_get of 100k keys resets the connection; 1,024 per call is as fast.
        for start in range(0, len(new), MULTI_GET_CHUNK):
            chunk = new[start:start + MULTI_GET_CHUNK]
            raws = self.store.multi_get([f"rank/{r}" for r in chunk])
            if self.secret:
                chunk, raws = self._proven(collected, chunk, raws)
            self.accept_many(collected, chunk, raws)

    def _proven(self, collected: Collected, ranks: list[int], raws: list[bytes]) -> tuple[list[int], list[bytes]]:
        """The payloads whose proof of the run secret holds; the others are RUN002, not read."""
        assert self.secret is not None
        keys = [f"auth/{r}" for r in ranks]
        proofs = (self.store.multi_get(keys) if self.store.check(keys) else
                  [self.store.get(k) if self.store.check([k]) else b"" for k in keys])
        kept: tuple[list[int], list[bytes]] = ([], [])
        for rank, raw, claimed in zip(ranks, raws, proofs, strict=True):
            if run_auth.valid_payload(self.secret, bytes(claimed).decode(errors="replace"), self.nonce, rank, raw):
                kept[0].append(rank)
                kept[1].append(raw)
            else:
                collected.bad_payloads[rank] = (f"no valid proof of {run_auth.SECRET_VAR}: not from this run's rank "
                                                "(a foreign process, or a rank with another secret)")
        return kept

    def _find_duplicates(self, collected: Collected) -> None:
        if self.store is None or self.store.add("reported", 0) <= len(collected.payloads):
            return
        for rank in collected.payloads:
            claims = self.store.add(f"claims/{rank}", 0)
            if claims > 1:
                collected.duplicates[rank] = [
                    self.store.get(f"claimant/{rank}/{n}").decode() for n in range(1, claims + 1)
                ]

    def _take_from_dir(self, collected: Collected) -> None:
        if self.out_dir is None or not self.out_dir.is_dir():
            return
        for rank in range(self.world.world_size):
            if rank in collected.payloads or rank in collected.bad_payloads:
                continue
            ours = self.out_dir / _rank_file(rank, self.nonce)
            bare = self.out_dir / _rank_file(rank, "")  # a rank that never reached the store
            try:
                if self.nonce and ours.is_file():
                    self._accept(collected, rank, ours.read_bytes())
                elif bare.is_file() and bare.stat().st_mtime >= self.started - CLOCK_SKEW_S:
                    self._accept(collected, rank, bare.read_bytes())
            except OSError:
                continue

    def _note_stale(self, collected: Collected) -> None:
        """--out-dir payload files of another run (another nonce, or bare and older than this run)."""
        if self.out_dir is None or not self.out_dir.is_dir():
            return
        stale = []
        for path in self.out_dir.glob("rank-*.json"):
            parts = path.name.split(".")
            if path.name.endswith("-report.json") or len(parts) not in (2, 3):
                continue  # a rank's own report (rank 0 was lost), read by people, not by rank 0
            try:
                if parts[1] != self.nonce if len(parts) == 3 else path.stat().st_mtime < self.started - CLOCK_SKEW_S:
                    stale.append(path.name)
            except OSError:
                continue
        collected.stale_files = sorted(stale)

    @staticmethod
    def accept_many(collected: Collected, ranks: Sequence[int], raws: Sequence[bytes]) -> None:
        """Decode a chunk of payloads with the cyclic garbage collector paused, then freeze them.

        Payloads live until the run ends; without this, each automatic collection rescans every
        payload decoded so far, and decoding 16,384 of them costs 3x more (measured)."""
        paused = gc.isenabled()
        gc.disable()
        try:
            for rank, raw in zip(ranks, raws):
                Exchange._accept(collected, rank, raw)
        finally:
            if paused:
                gc.enable()
            gc.freeze()  # move what is alive now out of the collector's generations

    @staticmethod
    def _accept(collected: Collected, rank: int, raw: bytes) -> None:
        """Decode and validate one rank's payload: the one place a peer's data enters rank 0."""
        try:
            payload = from_wire(raw, collected.shared)
            if payload.rank != rank or payload.facts.rank != rank:
                raise BadPayload(f"payload names rank {payload.rank}")
        except BadPayload as exc:
            collected.bad_payloads[rank] = str(exc)[:200]
            return
        collected.payloads[rank] = payload

    def announce(self, name: str, value: dict[str, Any]) -> None:
        """Rank 0: publish a decision (go, verdict) to every rank, naming this run's nonce."""
        value = {**value, NONCE_KEY: self.nonce}
        if self.secret:  # a rank adopts only a decision proven by this run's secret
            value[run_auth.PROOF_KEY] = run_auth.proof(self.secret, name, json.dumps(value, sort_keys=True))
        text = json.dumps(value)
        if name == "verdict" and self.heartbeat is not None:
            self.heartbeat.stop()
        if self.out_dir is not None:
            _atomic_write(self.out_dir / f"{name}.json", text)
        if self.store is not None:
            self.store.set(name, text)

    def publish_report(self, report: JobReport) -> None:
        """Rank 0, before the verdict (preflight.check only): the report every rank raises with.

        Without the per-rank facts: those stay in rank 0's report files; every rank gets the
        verdict, the findings and the probe results, O(findings) not O(N) per rank."""
        if self.store is not None:
            self.store.set("report", encode(dataclasses.replace(report, ranks=[])))

    def read_report(self) -> JobReport | None:
        """Another rank, after the verdict: the report rank 0 published (None when none arrived)."""
        try:
            if self.store is None or not self.store.check(["report"]):
                return None
            return decode(self.store.get("report"), JobReport)
        except Exception:  # the store went away, or a payload that is not a report: the caller reports alone
            return None

    def wait_for_acknowledgements(self, expected: int, timeout_s: float) -> None:
        """Rank 0: keep the store up until `expected` ranks read the verdict, or the deadline."""
        if self.store is None or expected <= 0:
            return
        wait_until(lambda: self.store.add("done", 0) >= expected, timeout_s)


def agree_nonce(store: Any) -> str:
    """This run's random identity: the first rank to ask sets it, every other rank reads that one."""
    return bytes(store.compare_set(NONCE_KEY, "", secrets.token_hex(8))).decode()


def _rank_file(rank: int, nonce: str) -> str:
    """A rank's payload in --out-dir: named by the run's nonce, bare when the rank has none."""
    return f"rank-{rank}.{nonce}.json" if nonce else f"rank-{rank}.json"


def _safe(text: str) -> str:
    return "".join(c if c.isalnum() or c in "-_." else "_" for c in text) or "run"


def _one_line(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {one_line(exc, 400)}"


def _atomic_write(path: Path, data: str | bytes) -> None:
    """Write via a temporary file and rename, so a reader never sees half a file."""
    path.parent.mkdir(parents=True, exist_ok=True)
    handle, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    with os.fdopen(handle, "wb") as stream:
        stream.write(data.encode() if isinstance(data, str) else data)
    os.replace(tmp, path)
