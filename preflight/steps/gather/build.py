"""The exact build: a cheap fingerprint of the distributions that matter, and the container.

Two hosts can carry the same version string of torch or an nvidia-* wheel and still differ (a
rebuilt container, another wheel from a pip cache, an older image on some workers). pip's RECORD
lists every installed file with its sha256, so hashing RECORD's entries (less what the installer
itself writes) fingerprints a distribution without reading any of its files: ~15 ms for torch's
14,600 lines. The container is named from the markers its runtime leaves (Apptainer/Singularity,
Enroot, Docker, Podman) where they are visible.
"""

from __future__ import annotations

import hashlib
import importlib.metadata
import os
import re
from pathlib import Path
from typing import TYPE_CHECKING

from preflight.model import RankFacts
from preflight.model.placement_facts import BUCKETS, SMALL_RECORD, BuildFacts, DistBuild

if TYPE_CHECKING:
    from preflight.steps.gather import GatherOptions

# Always fingerprinted: torch, preflight itself, and NVIDIA's CUDA/NCCL/cuDNN wheels.
ALWAYS = ("torch", "preflight")
PREFIXES = ("nvidia-",)
MAX_DISTS = 256  # a venv with more nvidia-* wheels than this is not one anyone built
_NAME = re.compile(r"[-_.]+")
HASH_CHARS = 12  # of each file's urlsafe-base64 sha256: 72 bits tell two builds of one file apart


def canonical(name: str) -> str:
    """PEP 503's normalised name: `Nvidia_NCCL.cu12` -> `nvidia-nccl-cu12`."""
    return _NAME.sub("-", name).lower()


def gather(facts: RankFacts, options: GatherOptions) -> None:
    """Fill facts.placement.build with the wanted distributions' fingerprints and the container.

    Only on each node's local rank 0: the ranks of one host import from one filesystem, and a
    fingerprint of ~20 nvidia-* wheels is tens of KB, which 16,384 payloads need not carry 8 times."""
    if facts.world.local_rank != 0:
        return
    wanted = {canonical(n) for n in (*ALWAYS, *options.fingerprint)}
    seen: dict[str, DistBuild] = {}
    for dist in importlib.metadata.distributions():  # sys.path order: the first one found is the one imported
        name = canonical(_name(dist))
        if not name or name in seen or not (name in wanted or name.startswith(PREFIXES)):
            continue
        seen[name] = fingerprint(dist, name)
        if len(seen) >= MAX_DISTS:
            break
    facts.placement.build = BuildFacts(taken=True, dists=sorted(seen.values(), key=lambda d: d.name),
                                       container=container())


def _name(dist: importlib.metadata.Distribution) -> str:
    """A distribution's name, from its folder's name where it has one (`torch-2.5.1.dist-info`):
    reading every distribution's METADATA to find the few wanted cost 0.1-0.5 s on rank 0's first
    step with ~100 installed (an email-header parse each); the metadata's Name otherwise."""
    from_path = getattr(dist, "_normalized_name", None)  # importlib.metadata's, from the path (3.10+)
    return from_path if isinstance(from_path, str) and from_path else dist.metadata["Name"] or ""


def fingerprint(dist: importlib.metadata.Distribution, name: str) -> DistBuild:
    """One distribution's DistBuild from its RECORD (no digest when it has none)."""
    record = dist.read_text("RECORD")
    location = str(getattr(dist, "_path", "") or "")
    build = DistBuild(name=name, version=dist.version or "", location=str(Path(location).parent) if location else "")
    if not record:
        return build
    entries = {}
    for line in record.splitlines():
        path, _, rest = line.partition(",")
        digest = rest.partition(",")[0]
        if digest and not _installer_made(path):
            entries[path] = digest.partition("=")[2][:HASH_CHARS] or digest[:HASH_CHARS]
    build.digest = hashlib.sha256("\n".join(f"{p},{d}" for p, d in sorted(entries.items())).encode()).hexdigest()[:16]
    build.count = len(entries)
    if len(entries) <= SMALL_RECORD:
        build.files = entries
    else:
        build.buckets = bucket_digests(entries)
    return build


# What the installer writes, not the wheel: where it came from (direct_url.json names the wheel's
# path), which tool, and the console scripts (their shebang names the venv's python). Entries
# without a hash (the .pyc files pip compiles) say nothing about the build either.
_INSTALLER_FILES = ("/INSTALLER", "/REQUESTED", "/direct_url.json", "/RECORD")


def _installer_made(path: str) -> bool:
    return path.startswith("../") or (".dist-info/" in path and path.endswith(_INSTALLER_FILES))


def bucket_of(path: str) -> int:
    """Which of the BUCKETS file groups a path falls in (stable across hosts and Pythons)."""
    return hashlib.blake2s(path.encode(), digest_size=2).digest()[0] % BUCKETS


def bucket_digests(entries: dict[str, str]) -> list[str]:
    """One short digest per file group, over its sorted (path, hash) entries."""
    groups: list[list[str]] = [[] for _ in range(BUCKETS)]
    for path, digest in sorted(entries.items()):
        groups[bucket_of(path)].append(f"{path},{digest}")
    return [hashlib.sha256("\n".join(group).encode()).hexdigest()[:8] for group in groups]


def container(root: str = "/") -> str:
    """The container runtime (and image where its markers name one), "" when none is visible."""
    env = os.environ
    for var, runtime in (("APPTAINER_CONTAINER", "apptainer"), ("SINGULARITY_CONTAINER", "singularity")):
        if env.get(var):
            return f"{runtime}:{env[var]}"
    if env.get("ENROOT_ROOTFS") or Path(root, "etc/enroot").exists():
        return f"enroot:{env.get('ENROOT_ROOTFS', '')}".rstrip(":")
    podman = Path(root, "run/.containerenv")
    if podman.is_file():
        try:
            text = podman.read_text(errors="replace")[:4096]
        except OSError:
            text = ""
        image = re.search(r'^image="?([^"\n]*)', text, re.MULTILINE)
        return f"podman:{image.group(1)}" if image else "podman"
    if Path(root, ".dockerenv").exists():
        return "docker"
    return ""
