"""Environment drift: variables whose value differs across ranks.

Ranks started from the same job script should see the same environment. A variable that
changes collective behaviour (NCCL_*, GLOO_*, CUDA_*, LD_LIBRARY_PATH, ...) and differs on
some ranks is the classic cause of one node running another transport or another library
build; everything else that drifts is reported once, as info. Variables a launcher sets per
rank or per node (RANK, SLURM_PROCID, CUDA_VISIBLE_DEVICES, ...) are expected to differ.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from preflight.checks.nic_fabric import roce_setting_reports
from preflight.lib.env_drift import drifting, is_collective, is_per_rank, secret_numbers, value_label
from preflight.lib.grouping import describe, minority, short
from preflight.model import RankFacts, Severity
from preflight.registry import CROSS, JobView, Problem, Tags, check

__all__ = ["collective_env_drift", "is_collective", "is_per_rank", "other_env_drift"]

def summary(name: str, groups: dict[str | None, list[RankFacts]], ranks: Sequence[RankFacts]) -> str:
    """`NCCL_IB_HCA: \\`mlx5_0\\` on 14 hosts, unset on node07`."""
    numbers = secret_numbers(list(groups))

    def label(value: str | None) -> str:
        text = value_label(value, numbers)
        return text if value is None or value == "" or text.startswith("<redacted") else short(text)

    return f"{name}: {describe(groups, ranks, label)}"


@check(
    "ENV003",
    tag=Tags.ENV,
    scope=CROSS,
    severity=Severity.WARN,
    hint="Export one value for every rank in the job script (not a per-node profile), or unset it everywhere.",
)
def collective_env_drift(job: JobView) -> Iterable[Problem]:
    """A variable that changes collective behaviour differs across ranks.

    NCCL_*, TORCH_NCCL_*, TORCH_DISTRIBUTED_*, GLOO_*, CUDA_*, NVIDIA_*, FI_*, UCX_*,
    PYTORCH_CUDA_ALLOC_CONF, OMP_NUM_THREADS, LD_LIBRARY_PATH and LD_PRELOAD select transports,
    interfaces, timeouts, allocators and the libraries that get loaded. When they differ, ranks
    negotiate different protocols or load different NCCL builds: collectives hang or crawl on
    the odd node only. Variables set per rank by the launcher (CUDA_VISIBLE_DEVICES, RANK, ...)
    are not compared. The finding shows each value with the hosts (and ranks) holding it and
    names the ranks outside the most common value. Secret-looking values are compared by a
    keyed digest and shown as <redacted>. NCCL_IB_GID_INDEX, NCCL_IB_TC and
    NCCL_IB_ROCE_VERSION_NUM differing between hosts with RoCE ports are NIC006's finding, with
    the GID type each host ends up on, and not repeated here.
    """
    ranks = job.ranks
    for name, groups in drifting(ranks).items():
        if not is_collective(name) or roce_setting_reports(name, groups):
            continue  # (RoCE's GID index and traffic class across RoCE hosts: NIC006 says it, with the GID type)
        odd = minority(groups)
        yield Problem(
            summary(name, groups, ranks),
            ranks=[f.rank for f in odd],
            hosts=[f.host for f in odd],
            data={"variable": name},
        )


@check(
    "ENV004",
    tag=Tags.ENV,
    scope=CROSS,
    severity=Severity.INFO,
    hint="Usually harmless; if the job reads these variables, export them once in the job script.",
)
def other_env_drift(job: JobView) -> Iterable[Problem]:
    """Other environment variables differ across ranks (one finding for all of them).

    Drift outside the collective-relevant variables (see ENV003) rarely breaks a job, but it
    shows ranks were not started from the same environment: a per-node profile, another
    container image, a different working directory. The finding lists the variable names;
    its data holds a one-line summary per variable.
    """
    ranks = job.ranks
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
