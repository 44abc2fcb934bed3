"""The exact build across hosts: the same version string is not the same build (BLD001, BLD002).

Reads each rank's fingerprints (preflight/steps/gather/build.py): the digest of every wanted
distribution's RECORD and the container markers.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from preflight.lib.grouping import describe, group_by, minority, short
from preflight.model import RankFacts, Severity
from preflight.model.placement_facts import DistBuild
from preflight.registry import CROSS, JobView, Problem, Tags, check

SHOWN_FILES = 5  # files named in a message; the finding's data carries up to 50


def differing_files(odd: DistBuild, common: DistBuild) -> tuple[list[str], str]:
    """The files whose RECORD entry differs (with how many in all), or, for a large RECORD, which file groups."""
    if odd.files and common.files:
        paths = sorted(p for p in odd.files.keys() | common.files.keys() if odd.files.get(p) != common.files.get(p))
        return paths[:50], f"{len(paths)} file(s) differ"
    if len(odd.buckets) == len(common.buckets) and odd.buckets:
        groups = [i for i, (a, b) in enumerate(zip(odd.buckets, common.buckets, strict=True)) if a != b]
        return [], (f"{len(groups)} of {len(odd.buckets)} file groups differ ({odd.count} vs {common.count} files; "
                    f"its RECORD is too large to travel whole: diff `pip show -f {odd.name}` on both hosts)")
    return [], f"{odd.count} vs {common.count} files"


def _builds(facts: RankFacts) -> dict[str, DistBuild]:
    return {d.name: d for d in facts.placement.build.dists if d.digest}


@check(
    "BLD001",
    tag=Tags.SOFTWARE,
    scope=CROSS,
    severity=Severity.WARN,
    hint="Install the same build everywhere: one container image (pull it again on the odd hosts), or "
    "reinstall the named distribution from one wheel (pip install --force-reinstall --no-cache-dir); "
    "exclude the odd hosts until then.",
)
def build_differs(job: JobView) -> Iterable[Problem]:
    """Distributions whose version string is equal on every rank but whose build is not.

    A rebuilt container, a wheel from another pip cache or an image weeks older on some workers
    keep torch's or NCCL's version string and change what runs (SW001 passes them). Each rank
    fingerprints torch, the nvidia-* wheels, preflight and any `--fingerprint PKG` by the digest
    of its RECORD (pip's per-file sha256 list; no installed file is read); ranks whose digest
    differs from the most common one under the same version are named with the files that differ.
    """
    ranks = job.ranks
    # Only a node's local rank 0 fingerprints (steps/gather/build.py): the others have no distributions.
    builds = {facts.rank: _builds(facts) for facts in ranks if facts.placement.build.dists}
    names = sorted({name for table in builds.values() for name in table})
    for name in names:
        having = [f for f in ranks if name in builds.get(f.rank, ())]
        for version, same_version in group_by(having, lambda f, n=name: builds[f.rank][n].version).items():
            yield from _one_version(name, version, same_version, builds, ranks)


def _one_version(name: str, version: str, ranks: Sequence[RankFacts], builds: dict[int, dict[str, DistBuild]],
                 everyone: Sequence[RankFacts]) -> Iterable[Problem]:
    groups = group_by(ranks, lambda f: builds[f.rank][name].digest)
    if len(groups) < 2:
        return
    common = builds[next(iter(groups.values()))[0].rank][name]
    odd = minority(groups)
    by_digest = group_by(odd, lambda f: builds[f.rank][name].digest)
    for digest, members in by_digest.items():
        build = builds[members[0].rank][name]
        files, summary = differing_files(build, common)
        shown = ", ".join(files[:SHOWN_FILES]) + (", ..." if len(files) > SHOWN_FILES else "")
        where = describe({common.digest: groups[common.digest], digest: members}, everyone,
                         lambda d: f"RECORD {d[:8]}")
        yield Problem(
            f"{name} {short(version)}: same version, another build ({where}; the odd one in "
            f"{build.location or 'an unknown folder'}): {summary}" + (f": {shown}" if files else ""),
            ranks=[f.rank for f in members], hosts=sorted({f.host for f in members}),
            data={"distribution": name, "version": version, "digest": digest, "common_digest": common.digest,
                  "files": files, "location": build.location},
        )


@check(
    "BLD002",
    tag=Tags.SOFTWARE,
    scope=CROSS,
    severity=Severity.WARN,
    hint="Start every rank from the same container image (srun --container-image / apptainer exec with "
    "one .sif / one image digest).",
)
def container_differs(job: JobView) -> Iterable[Problem]:
    """Ranks that run in different containers (or some in none), where the runtime's markers show it.

    Apptainer/Singularity name their image in APPTAINER_CONTAINER / SINGULARITY_CONTAINER, Enroot
    its root filesystem, Podman its image in /run/.containerenv; Docker leaves only /.dockerenv.
    """
    ranks = [f for f in job.ranks if f.placement.build.taken]  # one per node (steps/gather/build.py)
    groups = group_by(ranks, lambda f: f.placement.build.container)
    if len(groups) < 2:
        return
    odd = minority(groups)
    yield Problem(f"container differs: {describe(groups, ranks, lambda c: short(c) if c else 'none')}",
                  ranks=[f.rank for f in odd], hosts=sorted({f.host for f in odd}))
