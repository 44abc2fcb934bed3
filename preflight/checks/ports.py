"""Rendezvous port checks: MASTER_PORT on the rank that hosts the store, and foreign stores.

`facts.network.master_port` exists only on the rank that hosts the c10d store itself
(preflight/steps/gather/master_port.py); under torchrun the agent's store legitimately holds the port.
"""

from __future__ import annotations

from collections.abc import Iterable

from preflight.lib.grouping import ranks_per_host
from preflight.lib.secrets import redact_command
from preflight.model import MasterPortState, RankFacts, Severity
from preflight.model.codec import to_builtins
from preflight.registry import CROSS, LOCAL, CheckContext, JobView, Problem, Tags, check, engine_check


def _port(facts: RankFacts) -> MasterPortState | None:
    return facts.network.master_port


def _suggestion(state: MasterPortState, facts: RankFacts) -> str:
    """The suggested port, saying truthfully what it was derived from (the job id, else the run id)."""
    port = state.suggested_port
    source = f"the job id {facts.world.job_id}" if facts.world.job_id else "this run's id"
    return f"; free now and derived from {source}: MASTER_PORT={port}" if port else ""


@check(
    "PORT001",
    tag=Tags.PORTS,
    scope=LOCAL,
    severity=Severity.ERROR,
    hint="Another process (often a previous or concurrent job) holds MASTER_PORT: stop it, or give "
    "this job its own port, e.g. one derived from the job id (preflight derives one when MASTER_PORT "
    "is unset under Slurm).",
)
def master_port_in_use(facts: RankFacts, ctx: CheckContext) -> Iterable[Problem]:
    """MASTER_PORT is already bound by another process on the rank that must host the store.

    The training's rendezvous would fail to listen, or worse, its ranks would connect to the
    other process (another job's store) and hang or mix two jobs. Where /proc shows it, the
    finding names the holder's pid and command.
    """
    state = _port(facts)
    if not state or not state.in_use:
        return
    holders = state.holders
    who = "; ".join(
        f"pid {h.pid} ({redact_command(h.command) or '?'})" if h.pid else f"an unnamed process on {h.address}"
        for h in holders
    ) or "a process not visible to this user"
    yield Problem(
        f"MASTER_PORT {state.port} on {facts.host} is already in use by {who}{_suggestion(state, facts)}",
        ranks=[facts.rank], hosts=[facts.host],
        data={"port": state.port, "holders": [to_builtins(h) for h in holders], "suggested_port": state.suggested_port},
    )


@check(
    "PORT002",
    tag=Tags.PORTS,
    scope=LOCAL,
    severity=Severity.WARN,
    hint="Pick a MASTER_PORT below the ephemeral range (/proc/sys/net/ipv4/ip_local_port_range), "
    "e.g. one derived from the job id, or reserve it with net.ipv4.ip_local_reserved_ports.",
)
def master_port_ephemeral(facts: RankFacts, ctx: CheckContext) -> Iterable[Problem]:
    """MASTER_PORT lies inside the host's ephemeral port range.

    The kernel hands ports from that range to outgoing connections; on a busy host one of
    them can take MASTER_PORT moments before the store listens, and the job fails to start.
    """
    state = _port(facts)
    span = state.ephemeral_range if state else None
    if not state or not span or not span[0] <= state.port <= span[1]:
        return
    yield Problem(
        f"MASTER_PORT {state.port} is inside the ephemeral range {span[0]}-{span[1]} on {facts.host}"
        f"{_suggestion(state, facts)}",
        ranks=[facts.rank], hosts=[facts.host], data={"port": state.port, "ephemeral_range": span},
    )


@check(
    "PORT003",
    tag=Tags.PORTS,
    scope=LOCAL,
    severity=Severity.ERROR,
    hint="Ports below 1024 need root or CAP_NET_BIND_SERVICE: use a port of 1024 or above.",
)
def master_port_privileged(facts: RankFacts, ctx: CheckContext) -> Iterable[Problem]:
    """MASTER_PORT is below 1024 and the store-hosting rank does not run as root."""
    state = _port(facts)
    if not state or not state.privileged or state.root:
        return
    yield Problem(
        f"MASTER_PORT {state.port} is privileged (<1024) and rank {facts.rank} on {facts.host} is not root"
        f"{_suggestion(state, facts)}",
        ranks=[facts.rank], hosts=[facts.host], data={"port": state.port},
    )


@engine_check(
    "PORT004",
    tag=Tags.PORTS,
    severity=Severity.ERROR,
    hint="MASTER_ADDR:MASTER_PORT is served by something other than this job's rank 0 (another job, "
    "or another program): give each job its own MASTER_PORT, e.g. derived from the job id.",
)
def foreign_store(rank: int, host: str, reason: str) -> Iterable[Problem]:
    """A rank reached MASTER_ADDR:MASTER_PORT, but what answers there is not this run's store.

    Rank 0 of every preflight run marks its store with the run id and world size; a rank that
    finds another mark (a second job on the same port) or no c10d store at all refuses to join,
    instead of mixing two jobs or hanging on a program that never answers.
    """
    yield Problem(f"rank {rank} on {host}: {reason}", ranks=[rank], hosts=[host])


@check(
    "PORT005",
    tag=Tags.PORTS,
    scope=CROSS,
    severity=Severity.INFO,
    hint="Give every rank one secret before the launcher starts them: `export PREFLIGHT_SECRET=$(openssl rand "
    "-hex 16)` before srun / torchrun / mpirun (mpirun: add `-x PREFLIGHT_SECRET`); sbatch/*.sbatch and "
    "`preflight launch` set one per job.",
)
def store_not_authenticated(job: JobView) -> Iterable[Problem]:
    """A run over more than one host without a run secret: the store's values were not authenticated.

    c10d's TCPStore has no authentication. Without `PREFLIGHT_SECRET` in every rank's
    environment (preflight/channel/run_auth.py), any process that reaches MASTER_ADDR:MASTER_PORT
    could have stood in for an absent rank (a payload with findings naming an innocent host)
    or ended the run with a forged verdict. On one host only the host's own processes reach
    the port through loopback, so a single-host run is not reported.
    """
    hosts = ranks_per_host(job.ranks)  # (kept: the job's hosts, counted once for every check)
    if job.authenticated or len(hosts) < 2:
        return
    yield Problem(f"the store's values were not authenticated (no PREFLIGHT_SECRET) on a run over {len(hosts)} "
                  "hosts: any process that reaches MASTER_ADDR:MASTER_PORT could have forged a rank's report or "
                  "the verdict", data={"hosts": len(hosts)})
