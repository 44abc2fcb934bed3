"""Step 4 and the go / verdict hand-offs: every rank reports to rank 0.

The channel is torch.distributed's c10d TCPStore, the engine the training itself uses for
rendezvous. Rank 0 hosts it at MASTER_ADDR:MASTER_PORT, except under torchrun, whose agent
already hosts one there (TORCHELASTIC_USE_AGENT_STORE): then every rank joins that store as
torch's env:// rendezvous does. A shared directory (`--out-dir` on the cluster filesystem)
is the fallback when the store cannot form; rank 0 merges what it finds in both.

Keys live under `preflight/<run id>/`, so a stale run's keys are never read. Every wait has
a deadline; a rank that did not report is the caller's finding, never a hang.

Run identity: a run id is not unique (two env:// jobs without a job id are both `env`), so
the ranks also agree on a random nonce through the store, first writer wins (channel/store_open.py),
which names their --out-dir files (channel/rank_files.py). And every rank claims its rank in
the store as it joins (channel/roster.py): a rank claimed by two processes counts as neither,
and a rank that joined and then stopped beating is dead, not waited for.

The parts: this module is the channel and the hand-offs (open, publish, collect, announce,
wait); channel/store_open.py hosting or joining the store and the agreements made through it;
channel/collected.py what rank 0 received and the payload's decode boundary;
channel/rank_files.py the --out-dir side; channel/roster.py claims and beats in the store.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any, TypeVar

import msgspec

from preflight.channel import keys, rank_files, roster, run_auth, store_open
from preflight.channel.board import BadValue, Board, fetch_raw, put_absent, set_raw_many
from preflight.channel.clock import ClockServer
from preflight.channel.collected import Collected, accept_referenced, own_findings_only
from preflight.channel.keys import Key, append_rank
from preflight.channel.liveness import STORE_LOST_GRACE_S, RankLiveness
from preflight.channel.sections import store_form
from preflight.channel.store_join import own_client, read_mark, run_prefix
from preflight.channel.wire import RankPayload, to_wire
from preflight.lib.deadline import call_with_deadline
from preflight.lib.files import atomic_write
from preflight.lib.torch_import import quiet_cpp_logs
from preflight.lib.waiting import wait_until
from preflight.model import JobReport, World
from preflight.model.codec import encode
from preflight.model.messages import GoDecision, OwnerMark, Verdict

__all__ = ["Collected", "Exchange", "RankPayload", "own_findings_only"]

Decision = TypeVar("Decision", GoDecision, Verdict)
LOST_CHECK_S = 2.0  # a follower whose store call failed asks the store once more, this long, before calling it gone
JOB_CLIENT_S = 10.0  # preflight.check: a second connection to the job's store (it is up; this bounds a sick one)


FOLLOWER_MIN_POLL_S = 0.02  # the ceiling's floor: a small job sees rank 0's decision within 20 ms


def follower_poll_s(world_size: int) -> float:
    """The longest pause between two looks at the store while waiting for rank 0: N / 8192 s,
    between 20 ms and 2 s, so all followers together make at most ~16,000 store calls per second
    (2 per look: the value and the heartbeat) whatever N. (A flat 0.2 s below 1,638 ranks made a
    4-rank launch's followers see the verdict up to 0.2 s late, and the launch end that much later.)"""
    return min(2.0, max(FOLLOWER_MIN_POLL_S, world_size / 8192))


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
        self.out_dir = rank_files.run_folder(out_dir, world.run_id) if out_dir else None
        self.started = time.time()
        # Is that rank alive? The run's one owner of the question (channel/liveness.py): this
        # rank's beat from its claim until it leaves and, on rank 0, the watch over the others'.
        # A follower that loses the store waits at most this long more for --out-dir's verdict, in all.
        self.liveness = RankLiveness(world.world_size, world.rank, lost_grace_s=min(STORE_LOST_GRACE_S, timeout_s))
        self.nonce = ""  # this run's identity, agreed through the store; "" without one
        self.secret = run_auth.run_secret()  # the launcher's per-run secret, if any (channel/run_auth.py)
        # Values refused under a decision's key (go, verdict, the owner mark): key -> why. A
        # follower says so as it leaves; rank 0's audit() makes them findings (RUN010).
        self.refused: dict[str, str] = {}
        self._root: Any = None  # rank 0 hosting: the store's root (its owner mark) ...
        self._mark: OwnerMark | None = None  # ... and the mark it wrote there
        self._announced: dict[str, GoDecision | Verdict] = {}  # rank 0: what it wrote under go / verdict
        self.clock_server: ClockServer | None = None  # rank 0's clock answerer (channel/clock.py)

    # -- forming the channel -------------------------------------------------------------

    def open(self) -> None:
        """Host or join the store. On failure, store_error says why and the dir is the channel."""
        if self.job_store is not None:
            from torch.distributed import PrefixStore

            # A connection of its own: torch's group creation blocks in the job's client (store waits
            # that hold its lock), and this rank's calls must never wait behind one (store_join.own_client).
            own = own_client(self.job_store, min(JOB_CLIENT_S, self.timeout_s))
            self.store = PrefixStore(self.prefix, own if own is not None else self.job_store)
        else:
            # c10d prints a C++ stack trace per failed connection attempt; the failure is one line here.
            with quiet_cpp_logs():
                formed = store_open.host_or_join(self.world, self.prefix, self.timeout_s, self.out_dir is not None)
            self.store, self.nonce, self.store_error = formed.store, formed.nonce, formed.error
            self.foreign, self._root, self._mark = formed.foreign, formed.root, formed.mark
        if self.store is not None:
            self._claim()

    def _claim(self) -> None:
        """Claim this rank in the store (channel/roster.py); a second claimant stops here (RankTaken, exit 2)."""
        try:
            first = roster.claim(self.store, self.world.rank, self.world.host) == 1
        except Exception as exc:  # the store went away as this rank joined: the dir may still answer
            self.store, self.store_error = None, store_open.error_line(exc)
            return
        if not first:
            raise roster.taken(self.store, self.world)
        self.liveness.joined(self.store)  # every other rank shows it is alive until it leaves

    # -- every rank ----------------------------------------------------------------------

    def _run_file(self, name: str) -> Path:
        """A file in this run's folder under --out-dir, made here: the user asked for that folder
        (wherever it is), and lib/files.py creates missing folders inside the current tree only."""
        assert self.out_dir is not None
        self.out_dir.mkdir(parents=True, exist_ok=True)
        return self.out_dir / name

    def publish(self, payload: RankPayload) -> None:
        """Send this rank's facts and findings to rank 0 (store and, if given, the dir).

        Into the store by reference (sections.store_form): the shared sections go under their digests,
        written only where the store does not hold them yet (a host's first rank writes them, the
        others find them), then the payload and the arrival."""
        text = to_wire(payload)
        if self.out_dir is not None:
            atomic_write(self._run_file(rank_files.rank_file(self.world.rank, self.nonce)), text)
        if self.store is not None:  # this rank's claim is in (open): a second claimant never gets here
            try:
                text, sections = store_form(text)
                put_absent(self.store, {keys.SECTION.at(digest): data for digest, data in sections.items()})
                if self.secret:  # before the payload: rank 0 reads both once the arrival is listed
                    self.store.set(keys.AUTH.at(self.world.rank),
                                   run_auth.payload_proof(self.secret, self.nonce, self.world.rank, text))
                self.store.set(keys.PAYLOAD.at(self.world.rank), text)
                # The arrival list lets rank 0 fetch only new payloads: O(new ranks) per poll.
                append_rank(self.store, keys.ARRIVALS.key, self.world.rank)
            except Exception as exc:  # rank 0, which hosts the store, is gone: the wait for its go says so
                self._lost(exc)

    def wait_for(self, key: Key[Decision], timeout_s: float) -> Decision | None:
        """Wait for a decision rank 0 publishes (keys.GO, keys.VERDICT); None when the deadline passes.

        Only a value of the key's type (model/messages.py), of this run (its nonce) and, with a
        run secret, proven by it is adopted; anything else under the key (a foreign client's
        `[1]`) is refused, noted in `refused`, and the wait goes on for rank 0's own.

        The deadline is pushed on while rank 0's heartbeat advances (channel/liveness.py). The
        poll backs off to a ceiling that grows with N (`follower_poll_s`), so thousands of
        waiting ranks ask the store a bounded number of times per second. (The store's own
        server-side wait was tried: each wait that times out logs a c10d warning on every rank.)
        """
        if not self.has_channel():
            return None
        deadline = self.liveness.lead_deadline(timeout_s)
        return wait_until(lambda: self._read_published(key), deadline.time_left,
                          stop_if=lambda: not self.has_channel(), max_poll_s=follower_poll_s(self.world.world_size))

    def _lost(self, exc: BaseException) -> None:
        """A follower's call on the store failed: rank 0, its host, is gone (liveness keeps when and why)."""
        self.liveness.lead_lost(exc)
        self.store = None

    def lost_store(self, exc: BaseException) -> bool:
        """A follower's step raised `exc` from a call on rank 0's store: True, with the store counted lost,
        where the store no longer answers (rank 0 is gone); False where it still does (not rank 0's doing).

        The probes write into the store between collectives; rank 0 dying between two writes is a
        broken pipe in whichever write comes next, and rank 0's departure, not this rank's failure."""
        if self.world.rank == 0 or self.store is None:
            return self.liveness.lost() is not None
        if self.liveness.lost() is None and call_with_deadline(self.store.check, LOST_CHECK_S, [keys.GO.key]).ok:
            return False
        self._lost(exc)
        return True

    def rank_0_gone(self) -> str:
        """A follower that had the store and lost it: one line saying rank 0 is gone ("" otherwise)."""
        if not self.nonce or (lost := self.liveness.lost()) is None:  # never joined: store_error says why
            return ""
        where = f"{self.world.master_addr}:{self.world.master_port}"
        host = f"the store at {where} (its launcher's agent's)" if self.world.use_agent_store else \
            f"the store it hosts at {where}"
        return f"rank 0 is gone: {host} closed the connection ({lost[1]})"

    def lead_heartbeat(self) -> RankLiveness:
        """Rank 0: beat while it works, so followers wait for it (stopped by announcing the verdict),
        and watch the others' beats until it leaves (nothing without a store: --out-dir only)."""
        self.liveness.lead()
        return self.liveness

    def has_channel(self) -> bool:
        """Whether anything can still arrive: a store, or a shared directory."""
        return self.store is not None or self.out_dir is not None

    def _read_published(self, key: Key[Decision]) -> Decision | None:
        if self.store is not None and self.liveness.lost() is not None:  # the beat found it gone
            self.store = None
        if self.store is not None:
            try:
                value = Board(self.store).read(key, -1)
            except Exception as exc:
                value = None
                self._lost(exc)  # rank 0 went away; the dir may still answer
            if (adopted := self._adopted(key, value)) is not None:
                return adopted
        if self.out_dir is not None:
            return self._adopted(key, rank_files.read_decision(self.out_dir, key, self.nonce, self.started))
        return None

    def _adopted(self, key: Key[Decision], value: Decision | BadValue | None) -> Decision | None:
        """`value` when it is this run's decision; None (the reason noted in `refused`) when it is not."""
        if value is None:
            return None
        why = (value.why if isinstance(value, BadValue) else
               f"another run's (nonce {value.nonce[:32]!r})" if self.nonce and value.nonce != self.nonce else
               "" if not self.secret or run_auth.proven(self.secret, key, value) else "its proof does not hold")
        if not why:
            return value
        self._refuse(key, why)
        return None

    def _refuse(self, key: str, why: str) -> None:
        forged = f"refused as forged (no valid proof of {run_auth.SECRET_VAR}): " if self.secret else "refused: "
        self.refused.setdefault(str(key), f"{forged}{why[:200]}")

    def refused_lines(self) -> list[str]:
        """One line per key under which a value was refused (for a follower to print as it leaves)."""
        return [f"the value under {key!r} was {why}" for key, why in sorted(self.refused.items())]

    def acknowledge(self) -> None:
        """Tell rank 0 this rank has read the verdict, so it may take the store down."""
        if self.store is not None:
            self.liveness.acknowledge()

    def leave(self, why: str = "") -> None:
        """This rank is done with the run: its beat stops (channel/liveness.py), and its clock answerer.
        With `why`, it leaves without the verdict (a signal, its own deadline) and says so, so that
        rank 0 does not wait for it."""
        self.stop_clock()
        if why:
            self.liveness.leave(why)
        else:
            self.liveness.stop()

    def stop_clock(self) -> None:
        """Rank 0: stop answering clock pings (channel/clock.py), once every rank has measured."""
        if self.clock_server is not None:
            self.clock_server.stop()
            self.clock_server = None

    # -- rank 0 --------------------------------------------------------------------------

    def collect(self, timeout_s: float) -> Collected:
        """Wait until every rank reported, was found claimed twice or dead, or the deadline passed; never longer."""
        collected = Collected()
        size, own = self.world.world_size, self.world.rank
        self.liveness.lead()  # the watch over the others' beats runs from here until rank 0 leaves

        def everyone_heard() -> bool:
            if self.store is not None:
                self._take_from_store(collected)
                roster.take_contested(self.store, collected, size)
                roster.take_dead(self.store, collected, self.liveness.dead(), own)
            if self.out_dir is not None:
                rank_files.take(collected, self.out_dir, size, self.nonce, self.started)
            return collected.complete(size, own)

        wait_until(everyone_heard, timeout_s, stop_if=lambda: not self.has_channel())
        if self.store is not None:
            roster.take_contested(self.store, collected, size)  # a claimant that came as the wait ended
            roster.name_claimants(self.store, collected)
        if self.out_dir is not None:
            collected.stale_files = rank_files.stale(self.out_dir, self.nonce, self.started)
        return collected

    def _take_from_store(self, collected: Collected) -> None:
        if self.store is None:
            return
        # Read as the claims are: any client can append to the list, so only ASCII ranks of this world count.
        listed = roster.listed(self.store, keys.ARRIVALS.key, self.world.world_size)
        new = sorted(listed - collected.heard(self.world.rank))
        # Chunked (board.fetch_raw): one multi_get of 100k keys resets the connection.
        read = [keys.PAYLOAD.at(r) for r in new]
        raws = [raw if raw is not None else b"" for raw in fetch_raw(self.store, read)]
        if self.secret:
            new, raws = self._proven(collected, new, raws)
        # The shared sections these payloads name that rank 0 has not seen: fetched once each, checked
        # against their digests (sections.SharedSections), then emptied in the store with the payloads:
        # what rank 0 has read, it holds decoded, and the store need not hold it any longer.
        learned = accept_referenced(collected, new, raws,
                                    lambda digests: fetch_raw(self.store, [keys.SECTION.at(d) for d in digests]))
        set_raw_many(self.store, [*read, *(keys.SECTION.at(d) for d in learned)], "")

    def _proven(self, collected: Collected, ranks: list[int], raws: list[bytes]) -> tuple[list[int], list[bytes]]:
        """The payloads whose proof of the run secret holds; the others are RUN002, not read."""
        assert self.secret is not None
        proofs = [raw if raw is not None else b"" for raw in fetch_raw(self.store, [keys.AUTH.at(r) for r in ranks])]
        kept: tuple[list[int], list[bytes]] = ([], [])
        for rank, raw, claimed in zip(ranks, raws, proofs, strict=True):
            if run_auth.valid_payload(self.secret, bytes(claimed).decode(errors="replace"), self.nonce, rank, raw):
                kept[0].append(rank)
                kept[1].append(raw)
            else:
                collected.bad_payloads[rank] = (f"no valid proof of {run_auth.SECRET_VAR}: not from this run's rank "
                                                "(a foreign process, or a rank with another secret)")
        return kept

    def announce(self, key: Key[Decision], value: Decision) -> None:
        """Rank 0: publish a decision (keys.GO, keys.VERDICT) to every rank, naming this run's nonce.

        Whatever a foreign client wrote under the key before is noted (audit) and overwritten."""
        value = run_auth.signed(self.secret, key, msgspec.structs.replace(value, nonce=self.nonce, proof=""))
        if key == keys.VERDICT.key:
            self.liveness.verdict_out()
        if self.out_dir is not None:
            atomic_write(self._run_file(f"{key}.json"), encode(value))
        if self.store is not None:
            self._look_before_writing(key)
            self._announced[key] = value
            Board(self.store).put(key, value)

    def _look_before_writing(self, key: Key[Any]) -> None:
        """Rank 0, before its decision: anything already under the key is a foreign client's."""
        try:
            found = Board(self.store).read(key, -1)
        except Exception:  # the store went away: the write below says so
            return
        if found is not None and found != self._announced.get(key):
            self._refuse(key, "written before rank 0 wrote its own" + (
                f" ({found.why})" if isinstance(found, BadValue) else " (not by rank 0: a foreign client)"))

    def audit(self) -> dict[str, str]:
        """Rank 0, before building the report: every key of a decision a foreign client wrote under
        (the owner mark changed, `go` not the one rank 0 wrote, a `verdict` before rank 0's), key -> why."""
        if self.store is not None:
            if keys.GO.key in self._announced:
                self._look_before_writing(keys.GO.key)
            if keys.VERDICT.key not in self._announced:
                self._look_before_writing(keys.VERDICT.key)
        if self._root is not None and self._mark is not None:
            try:
                mark = read_mark(self._root)
            except Exception:
                mark = self._mark
            if mark != self._mark:
                self._refuse(keys.OWNER.key, "not the mark rank 0 wrote" + (
                    f" ({mark.why})" if isinstance(mark, BadValue) else " (a foreign client overwrote it)"))
        return dict(self.refused)

    def publish_report(self, report: JobReport) -> None:
        """Rank 0, before the verdict (preflight.check only): the report every rank raises with.

        Without the per-rank facts: those stay in rank 0's report files; every rank gets the
        verdict, the findings and the probe results, O(findings) not O(N) per rank."""
        if self.store is not None:
            Board(self.store).put(keys.REPORT.key, msgspec.structs.replace(report, ranks=[]))

    def read_report(self) -> JobReport | None:
        """Another rank, after the verdict: the report rank 0 published (None when none arrived)."""
        try:
            report = Board(self.store).read(keys.REPORT.key, 0) if self.store is not None else None
        except Exception:  # the store went away: the caller reports alone
            return None
        return report if isinstance(report, JobReport) else None  # a value that is not a report: alone too

    def wait_for_acknowledgements(self, interrupted: bool = False) -> list[int]:
        """Rank 0: keep the store up until every rank alive has read the verdict (channel/liveness.py).

        Who is waited for is who is alive, not who rank 0's bookkeeping counts: a rank whose
        payload was refused, or the first claimant of a contested rank, waits for the verdict too;
        a rank the liveness watch knows gone (dead, or it said it left) is not waited for.
        Interrupted (SIGTERM, Ctrl-C): a moment for the followers' next look (two polls, at least
        1 s), no more; the verdict is exit 4, the code a follower that misses it exits with too."""
        if self.store is None:
            return []
        cap = max(1.0, 2 * follower_poll_s(self.world.world_size)) if interrupted else None
        return self.liveness.await_acknowledgements(cap)
