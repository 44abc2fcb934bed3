"""Software versions that must agree across ranks: torch and its build, NCCL, Python, driver."""

from __future__ import annotations

from collections.abc import Iterable

from preflight.lib.grouping import describe, group_by, minority, short
from preflight.model import RankFacts, Severity
from preflight.registry import CROSS, JobView, Problem, Tags, check

# Shown first, in this order; any other version of facts.versions is compared too.
_KEYS = ("torch", "torch_cuda", "nccl", "python", "driver")


def versions(facts: RankFacts) -> dict[str, str]:
    """This rank's versions that were read (the GPU driver comes from NVML, steps/gather/gpus.py)."""
    return facts.versions.known()


@check(
    "SW001",
    tag=Tags.SOFTWARE,
    scope=CROSS,
    severity=Severity.ERROR,
    hint="Run every rank from the same environment (container image, venv, module set) and "
    "driver; exclude or reimage the odd hosts.",
)
def version_mismatch(job: JobView) -> Iterable[Problem]:
    """torch (and its CUDA build), NCCL, Python and the GPU driver must be equal on every rank.

    Ranks with different torch or NCCL builds may speak different wire protocols (NCCL
    refuses mismatched versions, or worse, hangs), pickle objects differently in
    object collectives, and use different default algorithms. A different driver changes
    which CUDA features work. The finding names the hosts outside the most common version.
    """
    ranks = job.ranks
    # Ranks share their Versions object (rank 0 decodes each distinct section once): read each once,
    # and group the ranks only by a component whose distinct values differ (131,072 ranks: 3 s -> 0.1 s).
    of: dict[int, dict[str, str]] = {}
    for facts in ranks:
        if id(facts.versions) not in of:
            of[id(facts.versions)] = versions(facts)
    known = {key for found in of.values() for key in found}
    keys = [k for k in _KEYS if k in known] + sorted(known - set(_KEYS))
    for key in keys:
        if len({found.get(key, "") for found in of.values()}) < 2:
            continue
        groups = group_by(ranks, lambda f, key=key: of[id(f.versions)].get(key, ""))
        if len(groups) < 2:
            continue
        odd = minority(groups)
        yield Problem(
            f"{key} version differs: {describe(groups, ranks, lambda v: short(v) if v else 'unknown')}",
            ranks=[f.rank for f in odd],
            hosts=[f.host for f in odd],
            data={"component": key},
        )
