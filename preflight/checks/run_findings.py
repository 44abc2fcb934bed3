"""Engine findings: what the runner itself observes about the run (store, payloads, probes)."""

from __future__ import annotations

from collections.abc import Iterable

from preflight.lib.hostlist import rank_ranges, ranks_text
from preflight.model import Severity
from preflight.registry import Problem, Tags, engine_check


@engine_check(
    "RUN001",
    tag=Tags.RUN,
    severity=Severity.WARN,
    hint="Check that MASTER_ADDR:MASTER_PORT is reachable from every rank and that nothing else "
    "holds the port; the shared --out-dir carried this run instead.",
)
def store_did_not_form(rank: int, host: str, reason: str) -> Iterable[Problem]:
    """The c10d TCPStore could not be formed on a rank; the shared directory was used instead.

    preflight reports through the same TCPStore the training will use for rendezvous. When a
    rank cannot host or reach it, the fallback `--out-dir` still carries that rank's facts,
    but the training's own rendezvous will most likely fail the same way.
    """
    yield Problem(f"rank {rank} could not form the c10d store: {reason}", ranks=[rank], hosts=[host])


@engine_check(
    "RUN002",
    tag=Tags.RUN,
    severity=Severity.ERROR,
    hint="Run the same preflight version on every rank; a truncated payload can also mean a "
    "full --out-dir filesystem.",
)
def unreadable_payload(rank: int, reason: str) -> Iterable[Problem]:
    """A rank's report reached rank 0 but could not be read.

    Every rank sends its facts and findings as JSON. A payload that does not parse, or names
    another rank, usually means mixed preflight versions or a stale file in --out-dir.
    """
    yield Problem(f"rank {rank} sent a report that could not be read: {reason}", ranks=[rank])


@engine_check(
    "RUN003",
    tag=Tags.RUN,
    severity=Severity.COULD_NOT_RUN,
    hint="Fix the errors above first; the probes run only on a world known to be whole.",
)
def probes_not_started(reason: str) -> Iterable[Problem]:
    """The collective probes were requested but not started.

    Probes (all-reduce, all-to-all, ...) would only hang on a world that is known to be
    broken, so rank 0 gives a no-go when ranks are missing or errors were found.
    """
    yield Problem(f"probes not started: {reason}")


@engine_check(
    "RUN004",
    tag=Tags.RUN,
    severity=Severity.COULD_NOT_RUN,
    hint="The run was stopped (SIGTERM, SIGINT or a crash) before it finished; the report holds "
    "what was known by then.",
)
def run_interrupted(reason: str) -> Iterable[Problem]:
    """The run was interrupted before every step finished; the verdict is incomplete."""
    yield Problem(f"run interrupted: {reason}")


@engine_check(
    "RUN005",
    tag=Tags.RUN,
    severity=Severity.COULD_NOT_RUN,
    hint="A fact gatherer overran --check-timeout or failed; checks that need its facts are "
    "unverified on these ranks.",
)
def gatherer_failed(name: str, reason: str, ranks: list[int], hosts: list[str]) -> Iterable[Problem]:
    """A fact gatherer (environment, versions, network, GPUs, ...) failed on some ranks."""
    yield Problem(f"gathering {name} facts failed: {reason}", ranks=ranks, hosts=hosts)


@engine_check(
    "RUN006",
    tag=Tags.RUN,
    severity=Severity.WARN,
    hint="Run the same preflight on every rank; a payload speaking for other ranks or hosts can also "
    "come from a process that is not this job's rank (see docs/architecture.md, the store's exposure).",
)
def foreign_findings_dropped(rank: int, dropped: int, example: str) -> Iterable[Problem]:
    """A rank's payload held findings about other ranks or hosts; they were dropped.

    A rank's local checks only judge its own facts, so every finding it sends names its own
    rank and host. One that names others (`nodeZ is broken`) would otherwise reach the verdict
    and the exclude list on the word of a single process.
    """
    yield Problem(f"rank {rank} sent {dropped} finding(s) about other ranks or hosts; dropped (e.g. {example})",
                  ranks=[rank], data={"dropped": dropped})


@engine_check(
    "RUN007",
    tag=Tags.RUN,
    severity=Severity.COULD_NOT_RUN,
    hint="Look at rank 0's log and host (a crash, an OOM kill, a node failure); this rank's own "
    "report is in --out-dir, and rank 0's host is the one to check first.",
)
def rank_zero_lost(rank: int, master: str, reason: str) -> Iterable[Problem]:
    """Rank 0 stopped answering before it published the verdict; this rank reports alone.

    Every rank adopts rank 0's verdict. When rank 0 is gone (its store closed, its heartbeat
    stopped), a rank with a shared `--out-dir` writes its own report there instead, so the job
    still leaves a record that names what happened, and exits incomplete.
    """
    yield Problem(f"rank 0 ({master}) gave no verdict to rank {rank}: {reason}", ranks=[0],
                  data={"reporting_rank": rank})


@engine_check(
    "RUN008",
    tag=Tags.RUN,
    severity=Severity.ERROR,
    hint="Look at the named rank's log and host (an OOM kill, a segfault, a node or driver failure, "
    "someone's kill); the ranks stopped after it are not at fault.",
    blames_host=True,
)
def rank_died(rank: int, host: str, how: str, when: str) -> Iterable[Problem]:
    """A rank died during the run: killed, crashed, or stopped answering.

    Told by the launcher where it knows (`preflight launch`: the signal or exit code), else by
    the rank's heartbeat stopping: while the probes ran, or during the exchange, after the rank
    joined the store and before its facts arrived. Ranks that a launcher stopped after
    the death are not blamed; the dead rank is.
    """
    where = f" on {host}" if host else ""
    yield Problem(f"rank {rank}{where} died {when}: {how}", ranks=[rank], hosts=[host] if host else [],
                  data={"how": how, "when": when})


@engine_check(
    "RUN009",
    tag=Tags.RUN,
    severity=Severity.INFO,
    hint="Files of an earlier (or concurrent) run in the same --out-dir were ignored; give each run "
    "its own folder, or clean it, to keep the folder readable.",
)
def stale_files_ignored(folder: str, files: list[str]) -> Iterable[Problem]:
    """Payload files of another run in --out-dir were ignored.

    Each run's ranks agree on a random nonce through the store and name their --out-dir files
    with it, so files left by an earlier run in a reused folder are never read as this run's
    (which would hide a rank that never started).
    """
    shown = ", ".join(files[:5]) + (f" and {len(files) - 5} more" if len(files) > 5 else "")
    yield Problem(f"{len(files)} file(s) of another run in {folder} ignored: {shown}", data={"files": files[:100]})


@engine_check(
    "RUN010",
    tag=Tags.RUN,
    severity=Severity.ERROR,
    hint="Something besides this run's ranks writes into its store: give the job a MASTER_PORT that only it "
    "uses, keep the port off networks others reach, and set PREFLIGHT_SECRET (preflight launch and the "
    "sbatch scripts do) so that a forged value is refused.",
)
def store_value_refused(key: str, reason: str) -> Iterable[Problem]:
    """A value under a key that decides the run (the owner mark, go, verdict) was not rank 0's.

    Only rank 0 writes the owner mark, the go decision and the verdict, each a typed message
    (channel/keys.py). A value rank 0 did not write, or one that is not of the key's type (`[1]`
    as the verdict), came from a foreign client of the store: it is refused, never adopted, and
    every rank leaves with rank 0's exit code, or exit 4 where rank 0's never arrived.
    """
    yield Problem(f"the value under {key!r} in the run's store was {reason}", data={"key": key})


@engine_check(
    "RUN011",
    tag=Tags.RUN,
    severity=Severity.ERROR,
    hint="Start every rank with the same preflight command line (or preflight.check keywords) and the same "
    "preflight version: the ranks named were started otherwise (a job script edited on one node, a stale "
    "pod template or image). The finding names the option and each value with its ranks.",
)
def options_disagree(option: str, values: dict[str, list[int]]) -> Iterable[Problem]:
    """The ranks were started with different values of an option every rank must agree on, or from different
    preflight versions.

    The probes' collectives need every rank to run the same steps: a rank with other sizes, ops,
    iterations or mesh makes gloo abort or the groups hang, and other timeouts or selections make
    the ranks wait for steps the others never take. Every rank sends the options marked "ranks
    agree" (docs/options.md) and its preflight and wire versions with its payload; rank 0 compares
    them before any collective, and on a difference no rank enters the probes. The ranks outside
    the largest group (rank 0's on a tie) are named.
    """
    ordered = sorted(values.items(), key=lambda item: (-len(item[1]), 0 not in item[1], min(item[1])))
    odd = sorted(rank for _, ranks in ordered[1:] for rank in ranks)
    shown = "; ".join(f"{value or 'none'} on {ranks_text(ranks)}"
                      for value, ranks in sorted(values.items(), key=lambda item: min(item[1])))
    yield Problem(f"{option}: {shown}", ranks=odd,
                  data={"option": option, "values": {value: rank_ranges(ranks) for value, ranks in values.items()}})


@engine_check(
    "RUN012",
    tag=Tags.RUN,
    severity=Severity.COULD_NOT_RUN,
    hint="Give the run something to measure: a mesh with the dimension the op needs (--mesh pp2,tp2 for "
    "send_recv), two or more ranks (preflight launch -n N, srun, torchrun), or only the families this "
    "machine has (--only gpu needs an NVIDIA driver).",
)
def nothing_measured(reason: str, what: str = "") -> Iterable[Problem]:
    """Something the run was asked for measured nothing: a probe plan or an `--only` family.

    Asked for and not measured is never a pass, as in DCGM's and NHC's "could not run": an
    `--ops send_recv` on a mesh without a pipeline dimension has no step to run, one rank has
    no collective to measure (its bus bandwidth is 0 by definition), and `--only gpu` on a
    machine without an NVIDIA driver checked nothing. Each is said with its reason and makes
    the run incomplete (exit 4), never PASSED.
    """
    yield Problem(reason, data={"what": what} if what else {})
