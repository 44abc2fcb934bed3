"""Environment drift: variables whose value differs across ranks.

Ranks started from the same job script should see the same environment. A variable that
changes collective behaviour (NCCL_*, GLOO_*, CUDA_*, LD_LIBRARY_PATH, ...) and differs on
some ranks is the classic cause of one node running another transport or another library
build; everything else that drifts is reported once, as info. Variables a launcher sets per
rank or per node (RANK, SLURM_PROCID, CUDA_VISIBLE_DEVICES, ...) are expected to differ.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from preflight.checks._groups import describe, group_by, minority, short
from preflight.model import RankFacts, Severity
from preflight.registry import CROSS, CheckContext, Problem, check
from preflight.secrets import REDACTED, is_redacted

COLLECTIVE_PREFIXES = ("NCCL_", "TORCH_NCCL_", "TORCH_DISTRIBUTED_", "GLOO_", "CUDA_", "NVIDIA_", "FI_", "UCX_")
COLLECTIVE_NAMES = frozenset({"PYTORCH_CUDA_ALLOC_CONF", "OMP_NUM_THREADS", "LD_LIBRARY_PATH", "LD_PRELOAD"})

# Set per rank or per node by launchers, shells and schedulers: differing is normal.
PER_RANK_NAMES = frozenset({
    # torchrun / env://
    "RANK", "LOCAL_RANK", "GROUP_RANK", "ROLE_RANK", "NODE_RANK", "LOCAL_WORLD_SIZE", "TORCHELASTIC_ERROR_FILE",
    # Slurm
    "SLURM_PROCID", "SLURM_LOCALID", "SLURM_NODEID", "SLURMD_NODENAME", "SLURM_TOPOLOGY_ADDR", "SLURM_TASK_PID",
    "SLURM_GTIDS", "SLURM_STEP_GPUS", "SLURM_JOB_GPUS", "SLURM_CPUS_ON_NODE", "SLURM_LAUNCH_NODE_IPADDR",
    "SLURM_CPU_BIND", "SLURM_CPU_BIND_LIST", "SLURM_CPU_BIND_TYPE", "SLURM_CPU_BIND_VERBOSE", "GPU_DEVICE_ORDINAL",
    "SLURM_STEP_NODELIST_LOCAL", "SLURM_PRIO_PROCESS",
    # Open MPI / PMIx / MPICH / Cray PALS
    "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_LOCAL_RANK", "OMPI_COMM_WORLD_NODE_RANK", "OMPI_COMM_WORLD_LOCAL_SIZE",
    "OMPI_MCA_orte_ess_vpid", "OMPI_MCA_ess_base_vpid", "OMPI_MCA_orte_ess_node_rank", "OMPI_FILE_LOCATION",
    "OMPI_MCA_orte_local_daemon_uri", "OMPI_MCA_orte_hnp_uri", "OMPI_MCA_orte_num_nodes", "OMPI_MCA_ess_base_num_procs",
    "PMIX_RANK", "PMIX_ID", "PMIX_HOSTNAME", "PMIX_SERVER_URI2", "PMIX_SERVER_URI21", "PMIX_SERVER_URI3",
    "PMIX_SERVER_URI4", "PMIX_SERVER_URI41", "PMIX_SERVER_TMPDIR", "PMIX_SYSTEM_TMPDIR", "PMIX_PTL_MODULE",
    "PMI_RANK", "PMI_FD", "PMI_ID", "MPI_LOCALRANKID", "MPI_LOCALNRANKS", "PALS_RANKID", "PALS_LOCAL_RANKID",
    "PALS_NODEID", "PMI_LOCAL_RANK", "PMI_LOCAL_SIZE",
    # Kubeflow / Kubernetes
    "PET_NODE_RANK", "JOB_COMPLETION_INDEX", "POD_NAME", "POD_IP", "KUBERNETES_POD_NAME",
    # devices bound per rank
    "CUDA_VISIBLE_DEVICES", "NVIDIA_VISIBLE_DEVICES", "ROCR_VISIBLE_DEVICES", "HIP_VISIBLE_DEVICES",
    "ZE_AFFINITY_MASK",
    # shells
    "HOSTNAME", "HOST", "_", "OLDPWD", "SHLVL", "PPID", "SSH_CLIENT", "SSH_CONNECTION", "SSH_TTY",
})
PER_RANK_PREFIXES = ("PMIX_SERVER_URI", "OMPI_MCA_orte_", "OMPI_MCA_pmix_")


def is_per_rank(name: str) -> bool:
    """True for variables a launcher sets differently on every rank or node."""
    return name in PER_RANK_NAMES or name.startswith(PER_RANK_PREFIXES)


def is_collective(name: str) -> bool:
    """True for variables that change how collectives, CUDA or the loader behave."""
    return name in COLLECTIVE_NAMES or name.startswith(COLLECTIVE_PREFIXES)


def _value_label(value: str | None, secret_numbers: dict[str, int]) -> str:
    if value is None:
        return "unset"
    if value == "":
        return "empty"
    if is_redacted(value):  # never show a digest: numbered placeholders tell groups apart
        if len(secret_numbers) <= 1:
            return REDACTED
        return f"<redacted #{secret_numbers[value]}>"
    return short(value)


def drifting(ranks: Sequence[RankFacts]) -> dict[str, dict[str | None, list[RankFacts]]]:
    """Every variable (not per-rank) whose value differs across ranks, with its groups.

    A bare `<redacted>` (no key: the --out-dir fallback) cannot be compared and is left out.
    """
    names = sorted({name for facts in ranks for name in facts.env if not is_per_rank(name)})
    result = {}
    for name in names:
        comparable = [f for f in ranks if f.env.get(name) != REDACTED]
        values = {f.env.get(name) for f in comparable}
        if len(values) > 1:
            result[name] = group_by(comparable, lambda f, name=name: f.env.get(name))
    return result


def summary(name: str, groups: dict[str | None, list[RankFacts]], ranks: Sequence[RankFacts]) -> str:
    """`NCCL_IB_HCA: \\`mlx5_0\\` on 14 hosts, unset on node07`."""
    secret_values = sorted(v for v in groups if v is not None and is_redacted(v))
    numbers = {value: index + 1 for index, value in enumerate(secret_values)}
    return f"{name}: {describe(groups, ranks, lambda v: _value_label(v, numbers))}"


@check(
    "ENV003",
    tag="env",
    scope=CROSS,
    severity=Severity.WARN,
    hint="Export one value for every rank in the job script (not a per-node profile), or unset it everywhere.",
)
def collective_env_drift(ranks: Sequence[RankFacts], ctx: CheckContext) -> Iterable[Problem]:
    """A variable that changes collective behaviour differs across ranks.

    NCCL_*, TORCH_NCCL_*, TORCH_DISTRIBUTED_*, GLOO_*, CUDA_*, NVIDIA_*, FI_*, UCX_*,
    PYTORCH_CUDA_ALLOC_CONF, OMP_NUM_THREADS, LD_LIBRARY_PATH and LD_PRELOAD select transports,
    interfaces, timeouts, allocators and the libraries that get loaded. When they differ, ranks
    negotiate different protocols or load different NCCL builds: collectives hang or crawl on
    the odd node only. Variables set per rank by the launcher (CUDA_VISIBLE_DEVICES, RANK, ...)
    are not compared. The finding shows each value with the hosts (and ranks) holding it and
    names the ranks outside the most common value. Secret-looking values are compared by a
    keyed digest and shown as <redacted>.
    """
    for name, groups in drifting(ranks).items():
        if not is_collective(name):
            continue
        odd = minority(groups)
        yield Problem(
            summary(name, groups, ranks),
            ranks=[f.rank for f in odd],
            hosts=[f.host for f in odd],
            data={"variable": name},
        )


@check(
    "ENV004",
    tag="env",
    scope=CROSS,
    severity=Severity.INFO,
    hint="Usually harmless; if the job reads these variables, export them once in the job script.",
)
def other_env_drift(ranks: Sequence[RankFacts], ctx: CheckContext) -> Iterable[Problem]:
    """Other environment variables differ across ranks (one finding for all of them).

    Drift outside the collective-relevant variables (see ENV003) rarely breaks a job, but it
    shows ranks were not started from the same environment: a per-node profile, another
    container image, a different working directory. The finding lists the variable names;
    its data holds a one-line summary per variable.
    """
    found = {name: groups for name, groups in drifting(ranks).items() if not is_collective(name)}
    if not found:
        return
    names = list(found)
    shown = ", ".join(names[:6]) + (f" (+{len(names) - 6} more)" if len(names) > 6 else "")
    odd = {f.rank: f for groups in found.values() for f in minority(groups)}
    yield Problem(
        f"{len(names)} other variable(s) differ across ranks: {shown}",
        ranks=list(odd),
        hosts=[f.host for f in odd.values()],
        data={"variables": {name: summary(name, groups, ranks) for name, groups in list(found.items())[:50]}},
    )
