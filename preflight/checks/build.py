"""The exact build across hosts: the same version string is not the same build (BLD001, BLD002).

Reads each rank's fingerprints (preflight/steps/gather/build.py): the digest of every wanted
distribution's RECORD and the container markers.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Iterable, Sequence
from itertools import chain

from preflight.lib.grouping import describe, group_by, minority, short
from preflight.model import RankFacts, Severity
from preflight.model.placement_facts import BuildFacts, DistBuild
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


def _takers(ranks: Sequence[RankFacts]) -> list[tuple[dict[str, DistBuild], list[int]]]:
    """Each distinct build fingerprint's distributions by name, and the positions in `ranks` of the ranks
    that sent it. Only a node's local rank 0 fingerprints (steps/gather/build.py), and rank 0 holds one
    object per distinct fingerprint (a host part: model/host_parts.py): the distributions are read once
    per fingerprint, not once per rank and name (16,384 hosts x 60 distributions: 2-3 s)."""
    found: dict[int, tuple[BuildFacts, list[int]]] = {}
    for index, facts in enumerate(ranks):
        build = facts.placement.build
        if build.dists:
            entry = found.get(id(build))
            if entry is None:
                found[id(build)] = (build, [index])
            else:
                entry[1].append(index)
    return [({d.name: d for d in build.dists if d.digest}, at) for build, at in found.values()]


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
    takers = _takers(ranks)
    for name in sorted({name for table, _ in takers for name in table}):
        having = [(at, table[name]) for table, at in takers if name in table]
        for version, same_version in _grouped(having, lambda d: d.version).items():
            yield from _one_version(name, version, same_version, ranks)


Taker = tuple[list[int], DistBuild]  # the positions of the ranks that sent a fingerprint, and its distribution


def _grouped(entries: list[Taker], key: Callable[[DistBuild], str]) -> dict[str, list[Taker]]:
    """Fingerprints grouped by key(distribution), the group of most ranks first (ties: by key), as group_by
    groups ranks."""
    groups: dict[str, list[Taker]] = defaultdict(list)
    for entry in entries:
        groups[key(entry[1])].append(entry)
    return dict(sorted(groups.items(), key=lambda item: (-sum(len(at) for at, _ in item[1]), item[0])))


def _one_version(name: str, version: str, same_version: list[Taker],
                 everyone: Sequence[RankFacts]) -> Iterable[Problem]:
    by_digest = _grouped(same_version, lambda d: d.digest)
    if len(by_digest) < 2:
        return
    # Each digest's ranks in the job's order, and the distribution as its first rank sent it.
    groups = {digest: [everyone[i] for i in sorted(chain.from_iterable(at for at, _ in takers))]
              for digest, takers in by_digest.items()}
    builds = {digest: min(takers, key=lambda taker: taker[0][0])[1] for digest, takers in by_digest.items()}
    common = builds[next(iter(groups))]
    for digest, members in list(groups.items())[1:]:
        build = builds[digest]
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
