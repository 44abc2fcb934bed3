"""Tests that need an outside tool skip with a reason on a laptop and fail under CI=true."""

from __future__ import annotations

import os
import shutil

import pytest


def in_ci() -> bool:
    """CI=true (or 1): a missing tool is a failure, never a silent skip."""
    return os.environ.get("CI", "").lower() in ("1", "true", "yes")


def require(condition: bool, reason: str) -> None:
    """Skip locally, fail in CI, when condition is false."""
    if condition:
        return
    if in_ci():
        pytest.fail(f"required in CI: {reason}")
    pytest.skip(reason)


# The Debian package that provides each outside tool the tests use (what the skip message says to install).
PACKAGES = {
    "nft": "nftables", "ip": "iproute2", "tc": "iproute2", "unshare": "util-linux", "mpirun": "openmpi-bin",
    "chromium": "chromium", "chromedriver": "chromium-driver", "srun": "slurm-wlm", "sbatch": "slurm-wlm",
    "slurmctld": "slurmctld", "slurmd": "slurmd", "munged": "munge",
    "initdb": "postgresql", "pg_ctl": "postgresql", "prometheus-node-exporter": "prometheus-node-exporter",
    "sshfs": "sshfs", "sshd": "openssh-server", "ssh-keygen": "openssh-client",
}


def require_tool(name: str, package: str | None = None) -> str:
    """The path of an executable, or skip (locally) / fail (CI) with what to install."""
    path = shutil.which(name) or (f"/usr/sbin/{name}" if os.path.exists(f"/usr/sbin/{name}") else None)
    package = package or PACKAGES.get(name, name)
    require(path is not None, f"{name} is not installed: install {package} (apt-get install {package})")
    return path or ""


def require_root() -> None:
    """Network namespaces and Slurm daemons need root."""
    require(os.geteuid() == 0, "needs root (run the tests as root; in a container, --privileged)")
