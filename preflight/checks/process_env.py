"""Process environment that DCGM and CUDA tools trip over, and threading defaults."""

from __future__ import annotations

from collections.abc import Iterable

from preflight.model import RankFacts, Severity
from preflight.registry import LOCAL, CheckContext, Problem, Tags, check

# Debugger / profiler hooks CUDA loads into every process (DCGM refuses to run alongside them).
INJECTION_VARIABLES = (
    "CUDA_INJECTION64_PATH", "CUDA_INJECTION32_PATH", "CUDA_ENABLE_COREDUMP_ON_EXCEPTION",
    "CUDA_ENABLE_CPU_COREDUMP_ON_EXCEPTION", "CUDA_ENABLE_USER_TRIGGERED_COREDUMP", "CUDA_COREDUMP_FILE",
    "CUDA_PROFILE", "COMPUTE_PROFILE", "CUDA_LAUNCH_BLOCKING", "CUDA_DEVICE_WAITS_ON_EXCEPTION",
    "NVTX_INJECTION64_PATH", "CUPTI_INJECTION64_PATH",
)


@check(
    "ENV006",
    tag=Tags.ENV,
    scope=LOCAL,
    severity=Severity.WARN,
    hint="Unset CUDA debugger/profiler variables for production runs (they come from a profiling "
    "wrapper or a debugging session's profile).",
)
def cuda_injection(facts: RankFacts, ctx: CheckContext) -> Iterable[Problem]:
    """CUDA debugger or profiler injection variables are set.

    CUDA_INJECTION64_PATH loads a tool library into every CUDA context, the coredump variables
    make a GPU exception stop the process to dump, CUDA_PROFILE / COMPUTE_PROFILE enable the
    legacy profiler and CUDA_LAUNCH_BLOCKING serialises every kernel. DCGM's diagnostics refuse
    to run next to them, and the job runs slower or stops on the first exception.
    """
    found = [name for name in INJECTION_VARIABLES if facts.env.get(name, "").strip() not in ("", "0")]
    if found:
        yield Problem(f"CUDA debugging/profiling variables set: {', '.join(found)}", ranks=[facts.rank],
                      hosts=[facts.host], data={"variables": found})


@check(
    "ENV007",
    tag=Tags.ENV,
    scope=LOCAL,
    severity=Severity.INFO,
    hint="Set OMP_NUM_THREADS to (cores per host / ranks per host), e.g. in the job script; "
    "torchrun sets 1, srun and mpirun do not.",
)
def omp_threads_unset(facts: RankFacts, ctx: CheckContext) -> Iterable[Problem]:
    """OMP_NUM_THREADS is unset while several ranks share this host.

    Each rank's OpenMP and intra-op thread pools then size themselves to every core of the
    host, so N ranks run N x cores threads: CPU-side work (data loading, gloo collectives,
    optimizer steps on CPU) oversubscribes the host and slows down several-fold.
    """
    if facts.world.local_world_size > 1 and not facts.env.get("OMP_NUM_THREADS", "").strip():
        yield Problem(f"OMP_NUM_THREADS is unset with {facts.world.local_world_size} ranks on this host",
                      ranks=[facts.rank], hosts=[facts.host])
