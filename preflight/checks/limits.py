"""Host and process limits that break NCCL transports: locked memory, /dev/shm."""

from __future__ import annotations

from collections.abc import Iterable

from preflight.model import RankFacts, Severity
from preflight.registry import LOCAL, CheckContext, Problem, Tags, check

GIB = 1 << 30
MEMLOCK_MIN = 16 * GIB
SHM_MIN = 1 * GIB


def _size(value: int) -> str:
    if value >= GIB:
        return f"{value / GIB:.1f} GiB"
    return f"{value / (1 << 20):.0f} MiB"


@check(
    "SYS001",
    tag=Tags.LIMITS,
    scope=LOCAL,
    severity=Severity.WARN,
    hint="Raise the locked-memory limit to unlimited (`ulimit -l unlimited`; Slurm: PropagateResourceLimits "
    "or slurmd's LimitMEMLOCK=infinity; Docker: --ulimit memlock=-1).",
)
def memlock_too_low(facts: RankFacts, ctx: CheckContext) -> Iterable[Problem]:
    """RLIMIT_MEMLOCK is below 16 GiB (and not unlimited) on a host with RDMA devices.

    InfiniBand / RoCE transfers need pinned (registered) memory. With a small memlock limit
    NCCL's memory registration fails ("ibv_reg_mr failed") or NCCL falls back to slower paths.
    Only checked on hosts with IB devices.
    """
    limit = facts.system.memlock_bytes
    if limit is None or limit < 0 or not facts.network.ib_ports:
        return  # unknown, unlimited (-1), or no RDMA on this host
    if limit < MEMLOCK_MIN:
        yield Problem(f"RLIMIT_MEMLOCK is {_size(limit)} on a host with RDMA devices (want unlimited, "
                      f">= {_size(MEMLOCK_MIN)})", ranks=[facts.rank], hosts=[facts.host],
                      data={"memlock_bytes": limit})


@check(
    "SYS002",
    tag=Tags.LIMITS,
    scope=LOCAL,
    severity=Severity.WARN,
    hint="Give /dev/shm at least 1 GiB (Docker: --shm-size=16g or --ipc=host; Kubernetes: an emptyDir "
    "with medium: Memory mounted at /dev/shm).",
)
def shm_too_small(facts: RankFacts, ctx: CheckContext) -> Iterable[Problem]:
    """/dev/shm is smaller than 1 GiB.

    NCCL's shared-memory transport and DataLoader workers allocate in /dev/shm; container
    defaults of 64 MiB make NCCL fail with "unhandled system error" / bus errors, or workers
    crash, once the buffers no longer fit.
    """
    size = facts.system.shm_bytes
    if size is not None and size < SHM_MIN:
        yield Problem(f"/dev/shm is {_size(size)} (want >= {_size(SHM_MIN)})", ranks=[facts.rank],
                      hosts=[facts.host], data={"shm_bytes": size})
