"""Fixtures that start real launchers' daemons (Slurm) for the tests in this folder."""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.helpers.netns import build_fake_hosts, default_prefix, netns_available
from tests.helpers.slurm import SlurmCluster, start_cluster, start_netns_cluster, stop_cluster
from tests.helpers.tools import require_root, require_tool

SLURM_TOOLS = ("slurmctld", "slurmd", "munged", "srun", "sbatch")


@pytest.fixture(scope="session")
def slurm_cluster() -> Iterator[SlurmCluster]:
    """A real slurmctld + 2 slurmd (node1, node2) + munged on this host, stopped after the session."""
    require_root()
    for tool in SLURM_TOOLS:
        require_tool(tool)
    # munged runs as the munge user and must traverse to its socket: pytest's tmp is 0700.
    base = Path(tempfile.mkdtemp(prefix="preflight-slurm-"))
    cluster = start_cluster(base, nodes=2)
    try:
        yield cluster
    finally:
        stop_cluster(cluster)
        shutil.rmtree(base, ignore_errors=True)


@pytest.fixture(scope="session")
def slurm_netns() -> Iterator[SlurmCluster]:
    """A real Slurm over 4 network-namespace hosts (own hostname, /etc/hosts, ib0, eth0): slurmd
    in each, slurmctld in the first, talking over eth0; stopped and removed after the session.
    Four, so that a job of three can lose two hosts and be resubmitted on the other two (spares)."""
    netns_available()
    for tool in SLURM_TOOLS:
        require_tool(tool)
    base = Path(tempfile.mkdtemp(prefix="preflight-slurmnet-"))
    network = build_fake_hosts(4, prefix=f"{default_prefix()}s")
    try:
        cluster = start_netns_cluster(base, network.hosts, [host.eth_address for host in network])
        try:
            yield cluster
        finally:
            stop_cluster(cluster)
    finally:
        network.close()
        shutil.rmtree(base, ignore_errors=True)
