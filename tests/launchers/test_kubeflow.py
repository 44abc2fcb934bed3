"""Kubeflow Trainer: two pods as two network-namespace hosts (own hostname and /etc/hosts, as pods
have), started with the PET_* variables the Trainer's torch runtime injects.

- the trainer container: `torchrun` with no flags of its own, every one from PET_NNODES,
  PET_NPROC_PER_NODE (`auto`), PET_NODE_RANK, PET_MASTER_ADDR, PET_MASTER_PORT (torchrun reads
  PET_<FLAG>), running preflight as the training's ranks;
- the init container: PET_* only, no torchrun, one preflight per pod (node level; --mesh refused).
"""

from __future__ import annotations

import sys
import time

import pytest

from preflight.reports.json import load as load_report
from tests.helpers.netns import FakeNetwork
from tests.helpers.ranks import base_env, free_port, wait_for_ranks
from tests.helpers.tools import require_tool

pytestmark = pytest.mark.netns


def _pet(hosts: FakeNetwork, node: int, port: int, **extra: str) -> dict[str, str]:
    """What the Trainer sets in pod `node` of a 2-node TrainJob (the master is pod 0's name)."""
    return base_env({"PET_NNODES": "2", "PET_NPROC_PER_NODE": "auto", "PET_NODE_RANK": str(node),
                     "PET_MASTER_ADDR": hosts[0].hostname, "PET_MASTER_PORT": str(port),
                     "TORCH_CPP_LOG_LEVEL": "ERROR", **extra})


def test_trainer_torchrun_from_pet_variables_across_two_pods(netns_hosts, tmp_path) -> None:
    hosts = netns_hosts(2)
    taskset = require_tool("taskset", package="util-linux")
    port, started = free_port(), time.monotonic()
    # `auto` on a CPU pod is its CPU count (its affinity); each pod gets two CPUs, as a pod limit would.
    procs = {node: hosts[node].popen(
        [taskset, "-c", "0,1", sys.executable, "-m", "torch.distributed.run", "-m", "preflight",
         "--skip", "probe", "--json", str(tmp_path / f"r{node}.json")],
        env=_pet(hosts, node, port), stdout=-1, stderr=-1, text=True, cwd=tmp_path) for node in (0, 1)}
    runs = wait_for_ranks(procs, started, timeout=180)
    assert [runs[n].returncode for n in (0, 1)] == [0, 0], runs[0].stderr[-3000:] + runs[1].stderr[-3000:]
    report = load_report(tmp_path / "r0.json")
    assert report.meta.launcher == "torchrun" and report.meta.world_size == 4 and report.exit_code == 0
    assert [(f.host, f.world.node_rank, f.world.local_rank) for f in report.ranks] == [
        (hosts[node].hostname, node, local) for node in (0, 1) for local in (0, 1)]
    # The workers' rendezvous is pod 0, by the name PET_MASTER_ADDR gave.
    assert {f.world.master_addr for f in report.ranks} == {hosts[0].hostname}
    assert report.ranks[0].world.raw["TORCHELASTIC_RUN_ID"]


def test_init_container_one_preflight_per_pod_is_node_level(netns_hosts, tmp_path) -> None:
    hosts = netns_hosts(2)
    port, started = free_port(), time.monotonic()
    procs = {node: hosts[node].popen(
        [sys.executable, "-m", "preflight", "--skip", "probe", "--json", str(tmp_path / f"r{node}.json")],
        env=_pet(hosts, node, port), stdout=-1, stderr=-1, text=True, cwd=tmp_path) for node in (0, 1)}
    runs = wait_for_ranks(procs, started, timeout=120)
    assert [runs[n].returncode for n in (0, 1)] == [0, 0], runs[0].stdout[-3000:] + runs[1].stderr[-3000:]
    report = load_report(tmp_path / "r0.json")
    assert report.meta.launcher == "kubeflow" and report.meta.world_size == 2
    assert [f.host for f in report.ranks] == [hosts[0].hostname, hosts[1].hostname]
    assert "kubeflow (node level: one preflight per pod, not the training's ranks)" in runs[0].stdout
    assert any("PET_NPROC_PER_NODE=auto" in d for d in report.ranks[0].world.decisions)

    refused = hosts[0].run([sys.executable, "-m", "preflight", "--mesh", "dp2"], env=_pet(hosts, 0, port),
                           check=False, cwd=tmp_path)
    assert refused.returncode == 2 and "Traceback" not in refused.stderr
    assert "--mesh describes the training's ranks, but a Kubeflow init container" in refused.stderr
