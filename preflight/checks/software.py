"""Software versions that must agree across ranks: torch and its build, NCCL, Python, driver."""

from __future__ import annotations

from collections.abc import Iterable

from preflight.lib.grouping import describe, group_by, minority, short
from preflight.model import RankFacts, Severity
from preflight.registry import CROSS, Grade, JobView, Problem, Tags, check

# Shown first, in this order; any other version of facts.versions is compared too.
_KEYS = ("torch", "torch_cuda", "nccl", "libnccl", "libcudnn", "libcublas", "python", "driver")
# The libraries a process mapped (steps/gather/versions.py): a rank that did not load one (a CPU rank, a
# static build) says nothing about it, so only the ranks that read a version are compared.
_LOADED = ("libnccl", "libcudnn", "libcublas")
# A different cuDNN or cuBLAS gives other bits for one product (other kernels), not a hang: a warning.
# A different NCCL (compiled against or loaded) may hang at the first collective: an error.
_BITS_ONLY = ("libcudnn", "libcublas")


def versions(facts: RankFacts) -> dict[str, str]:
    """This rank's versions that were read (the GPU driver comes from NVML, steps/gather/gpus.py)."""
    return facts.versions.known()


@check(
    "SW001",
    tag=Tags.SOFTWARE,
    scope=CROSS,
    severity=Severity.ERROR,
    hint="Run every rank from the same environment (container image, venv, module set) and "
    "driver; exclude or reimage the odd hosts. A loaded library (libnccl, libcudnn, libcublas) that "
    "differs comes from the odd host's LD_LIBRARY_PATH, pip wheel or conda package: "
    "`grep -E 'nccl|cudnn|cublas' /proc/<pid>/maps` on a rank shows which file.",
    grades=(Grade(Severity.WARN, "only the loaded cuDNN or cuBLAS differs (other bits, no hang)"),),
)
def version_mismatch(job: JobView) -> Iterable[Problem]:
    """torch (and its CUDA build), NCCL, Python, the GPU driver and the loaded libraries must be equal on every rank.

    Ranks with different torch or NCCL builds may speak different wire protocols (NCCL
    refuses mismatched versions, or worse, hangs), pickle objects differently in
    object collectives, and use different default algorithms. A different driver changes
    which CUDA features work. The NCCL, cuDNN and cuBLAS each process actually mapped are
    read from the library itself (`libnccl`, `libcudnn`, `libcublas`), not torch's
    compile-time numbers: a loaded NCCL that differs is an error as NCCL's own version is;
    a loaded cuDNN or cuBLAS that differs is a warning (ranks compute other bits for one
    product, and the correctness digest compares only devices of one cuBLAS). A rank that
    did not load a library is left out of its comparison. The finding names the hosts
    outside the most common version.
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
        if len({found.get(key, "") for found in of.values()} - ({""} if key in _LOADED else set())) < 2:
            continue
        groups = group_by(ranks, lambda f, key=key: of[id(f.versions)].get(key, ""))
        if key in _LOADED:
            groups.pop("", None)
        if len(groups) < 2:
            continue
        odd = minority(groups)
        compared = [f for members in groups.values() for f in members] if key in _LOADED else ranks
        yield Problem(
            f"{key} version differs: {describe(groups, compared, lambda v: short(v) if v else 'unknown')}",
            ranks=[f.rank for f in odd],
            hosts=[f.host for f in odd],
            data={"component": key},
            severity=Severity.WARN if key in _BITS_ONLY else None,
        )
