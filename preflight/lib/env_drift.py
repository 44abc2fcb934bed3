"""Which environment variables differ across ranks: one definition for checks and reports.

ENV003/ENV004 (checks/env_agreement.py) judge the drift; the text and HTML reports show it as a
table. Both read it from here, so they agree on what is expected to differ (variables a
launcher sets per rank) and on how a redacted value is shown (a numbered placeholder, never
its digest).
"""

from __future__ import annotations

from collections.abc import Sequence

from preflight.lib.grouping import LastAnswerKept, grouped
from preflight.lib.secrets import REDACTED, is_redacted
from preflight.model import RankFacts, table_ranks
from preflight.model.rank_env import shared_of

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


def value_label(value: str | None, secret_numbers: dict[str, int]) -> str:
    if value is None:
        return "unset"
    if value == "":
        return "(empty)"  # set to the empty string: in parentheses, as no real value is written
    if is_redacted(value):  # never show a digest: numbered placeholders tell groups apart
        if len(secret_numbers) <= 1:
            return REDACTED
        return f"<redacted #{secret_numbers[value]}>"
    return value


@LastAnswerKept
def drifting(ranks: Sequence[RankFacts]) -> dict[str, dict[str | None, list[RankFacts]]]:
    """Every variable (not per-rank) whose value differs across ranks, with its groups of ranks
    (drifting_rows' groups, each row its RankFacts). The last answer is kept (ENV003 and ENV004
    ask about the same ranks)."""
    return {name: {value: [ranks[row] for row in rows] for value, rows in groups.items()}
            for name, groups in drifting_rows(ranks).items()}


@LastAnswerKept
def drifting_rows(ranks: Sequence[RankFacts]) -> dict[str, dict[str | None, list[int]]]:
    """Every variable (not per-rank) whose value differs across ranks, with its groups: the rows
    (positions in `ranks`) holding each value, largest group first.

    A bare `<redacted>` (no key: the --out-dir fallback) cannot be compared and is left out.
    O(N x variables) at C speed: each rank's environment is compared with the first rank's as
    sets of items (a RankEnv's shared part once, then its own variables), and only the variables
    that differ somewhere are grouped in Python; a loaded report's ranks (model/table_ranks.py)
    name those variables themselves (its columns), and no RankFacts is built.
    The last answer is kept (the checks and the renderers ask about the same ranks).
    """
    candidates = table_ranks.env_differing(ranks)
    if candidates is None:
        candidates = _candidates(ranks)
    result = {}
    for name in sorted(n for n in candidates if not is_per_rank(n)):
        values = table_ranks.env_values(ranks, name)  # each rank's value read once (a RankEnv's get is Python)
        distinct = set(values)
        distinct.discard(REDACTED)
        if len(distinct) < 2:
            continue
        if REDACTED in values:
            kept = [(row, v) for row, v in enumerate(values) if v != REDACTED]
            result[name] = grouped([row for row, _ in kept], [v for _, v in kept])
        else:
            result[name] = grouped(range(len(values)), values)
    return result


def _candidates(ranks: Sequence[RankFacts]) -> set[str]:
    """The variables whose value differs from the first rank's somewhere (a superset of the drifting)."""
    reference = dict(ranks[0].env).items() if ranks else {}.items()
    candidates: set[str] = set()
    seen: set[int] = set()  # the shared parts (model/rank_env.py) already compared with the reference
    for facts in ranks:
        shared, own = shared_of(facts.env)
        if shared is None:
            candidates.update(name for name, _ in own.items() ^ reference)
            continue
        # What differs from the reference is in the rank's own part or where the shared part
        # differs (a superset: each candidate is judged), the shared part compared once.
        candidates.update(own)
        if id(shared) not in seen:
            seen.add(id(shared))
            candidates.update(name for name, _ in shared.items() ^ reference)
    return candidates


def secret_numbers(values: Sequence[str | None]) -> dict[str, int]:
    """Number the distinct redacted values 1..n, so groups can be told apart without digests."""
    secrets = sorted(v for v in set(values) if v is not None and is_redacted(v))
    return {value: index + 1 for index, value in enumerate(secrets)}
