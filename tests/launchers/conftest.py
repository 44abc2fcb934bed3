"""Fixtures that start real launchers' daemons (Slurm) for the tests in this folder."""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.helpers.slurm import SlurmCluster, start_cluster, stop_cluster
from tests.helpers.tools import require_root, require_tool


@pytest.fixture(scope="session")
def slurm_cluster() -> Iterator[SlurmCluster]:
    """A real slurmctld + 3 slurmd (node1..node3) + munged, stopped after the session."""
    require_root()
    for tool in ("slurmctld", "slurmd", "munged", "srun", "sbatch"):
        require_tool(tool)
    # munged runs as the munge user and must traverse to its socket: pytest's tmp is 0700.
    base = Path(tempfile.mkdtemp(prefix="preflight-slurm-"))
    cluster = start_cluster(base, nodes=3)
    try:
        yield cluster
    finally:
        stop_cluster(cluster)
        shutil.rmtree(base, ignore_errors=True)
