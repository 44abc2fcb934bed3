"""Spare nodes on a real Slurm over network-namespace hosts: `PREFLIGHT_SPARE=k` in
sbatch/train-with-preflight.sbatch asks for N+k nodes, checks all, and trains on the best N in
the same job (`srun --nodelist`), or fails, and resubmits, when fewer than N are healthy.

The cluster is the session's `slurm_netns` (shared with test_sbatch.py). A host is planted bad as
test_sbatch.py plants it (NCCL_SOCKET_IFNAME naming no interface, on that node only) and slowed
with a real tbf qdisc on its ib0. The training step is a real gloo all_reduce over the kept hosts,
so MASTER_ADDR and the task count of the step are checked by the job itself.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from preflight.lib.hostlist import expand_hostlist
from preflight.reports.json import load as load_report
from tests.helpers.slurm import SlurmCluster
from tests.launchers.test_sbatch import BIN, SBATCH, _env, _faulty, _output

pytestmark = pytest.mark.slurm
SCRIPT = SBATCH / "train-with-preflight.sbatch"
# Each task of the training step joins a gloo group over the step's tasks and writes what it saw.
TRAIN = """\
import datetime, os, pathlib, socket, torch, torch.distributed as dist
timeout = datetime.timedelta(seconds=60)
if "TORCHELASTIC_RUN_ID" in os.environ:  # a torchrun worker (PREFLIGHT_TASKS=node): env:// from torchrun
    dist.init_process_group("gloo", timeout=timeout)
    rank, world = dist.get_rank(), dist.get_world_size()
else:  # a task of the srun step: rank and size from Slurm, the rendezvous from the script's MASTER_ADDR
    rank, world = int(os.environ["SLURM_PROCID"]), int(os.environ["SLURM_NTASKS"])
    dist.init_process_group("gloo", init_method=f"tcp://{os.environ['MASTER_ADDR']}:{os.environ['MASTER_PORT']}",
                            rank=rank, world_size=world, timeout=timeout)
total = torch.tensor([float(rank + 1)])
dist.all_reduce(total)
pathlib.Path(OUT, f"trained-{rank}").write_text(" ".join([
    socket.gethostname(), os.environ["SLURM_JOB_ID"], os.environ["MASTER_ADDR"], str(world), str(int(total.item()))]))
dist.destroy_process_group()
"""


def _training(tmp_path: Path, tasks: str = "gpu") -> list[str]:
    """The training command: `python train.py` for srun's tasks, `train.py` for torchrun (which runs python)."""
    script = tmp_path / "train.py"
    script.write_text(f"OUT = {str(tmp_path)!r}\n" + TRAIN)
    return [str(script)] if tasks == "node" else [f"{BIN}/python", str(script)]


def _trained(tmp_path: Path) -> list[list[str]]:
    """Per training task (rank order): host, job id, MASTER_ADDR, world size, all_reduce sum."""
    return [p.read_text().split() for p in sorted(tmp_path.glob("trained-*"))]


@pytest.mark.parametrize("tasks", ["gpu", "node"])
def test_a_bad_host_is_dropped_and_training_runs_on_the_rest_in_the_same_job(slurm_netns: SlurmCluster,
                                                                             tmp_path: Path, tasks: str) -> None:
    # The first host is the bad one: MASTER_ADDR must move to a kept host. Both task styles: srun
    # runs the training's tasks, or torchrun on each kept node (one worker each) does.
    n1, n2, n3 = slurm_netns.node_names[:3]
    env = _env(slurm_netns, tmp_path, PREFLIGHT=_faulty(tmp_path, n1), PREFLIGHT_SPARE="1", PREFLIGHT_TASKS=tasks,
               PREFLIGHT_GPUS_PER_NODE="1")
    job, state = slurm_netns.sbatch(SCRIPT, ["-N", "3", "--ntasks-per-node=1"], _training(tmp_path, tasks), env,
                                    cwd=tmp_path)
    out = _output(tmp_path, "preflight-train", job)
    assert "ExitCode=0:0" in state, state + out
    assert re.search(rf"dropped {n1}: NCCL008: .*nosuch0", out), out
    assert f"training on 2 of 3 node(s): {n2},{n3}, master {n2}:" in out, out
    # Both kept hosts trained together, in this job, with the master on a kept host.
    trained = _trained(tmp_path)
    assert [t[0] for t in trained] == [n2, n3] and {tuple(t[1:]) for t in trained} <= {
        (job, n2, "2", "3"), (job, n3, "2", "3")}, out  # torchrun's workers: its rendezvous picks the master
    folder = tmp_path / f"preflight-{job}"
    assert (folder / "kept-hosts.txt").read_text() == f"{n2}\n{n3}\n"
    report = load_report(folder / "report.json")
    assert report.exit_code == 3 and report.host_choice is not None and report.host_choice.kept == [n2, n3]
    assert 'id="host-choice"' in (folder / "report.html").read_text()


def test_the_slow_host_is_dropped_when_none_fails(slurm_netns: SlurmCluster, tmp_path: Path) -> None:
    n1, n2, n3 = slurm_netns.node_names[:3]
    slow = slurm_netns.hosts[0]
    # Two tasks per node and a dp2,tp3 mesh: the slow host's groups have healthy siblings to be
    # compared with (one task per node would make one group, the world, with no sibling).
    env = _env(slurm_netns, tmp_path, PREFLIGHT_SPARE="1", PREFLIGHT_MESH="dp2,tp3", PREFLIGHT_TIMEOUT="90",
               PREFLIGHT_ARGS="--ops all_reduce --sizes 1MiB --warmup 1 --iters 5 --probe-timeout 60 --skip gpu,nic")
    slow.shape("ib0", rate="400mbit", burst="256kb", latency="100ms")
    try:
        job, state = slurm_netns.sbatch(SCRIPT, ["-N", "3", "--ntasks-per-node=2"], _training(tmp_path), env,
                                        cwd=tmp_path, timeout=300)
    finally:
        slow.unshape("ib0")
    out = _output(tmp_path, "preflight-train", job)
    assert "ExitCode=0:0" in state, state + out
    report = load_report(tmp_path / f"preflight-{job}" / "report.json")
    assert report.exit_code in (0, 3) and report.bad_hosts in ([], [n1]), out  # nothing else fails
    assert re.search(rf"dropped {n1}: ", out) and f"training on 2 of 3 node(s): {n2},{n3}, master {n2}:" in out, out
    # The slowest by the probes' figures, on the strongest evidence the run had.
    last = report.host_ranking.hosts[-1]
    assert last.host == n1 and (last.faults or last.slow_level > 0), report.host_ranking
    assert sorted(t[0] for t in _trained(tmp_path)) == [n2, n2, n3, n3]
    assert {tuple(t[1:]) for t in _trained(tmp_path)} == {(job, n2, "4", "10")}


def test_too_few_healthy_hosts_fail_with_the_reason_and_resubmit(slurm_netns: SlurmCluster, tmp_path: Path) -> None:
    n1, n2, n3, n4 = slurm_netns.node_names[:4]
    env = _env(slurm_netns, tmp_path, PREFLIGHT=_faulty(tmp_path, n1, n2), PREFLIGHT_SPARE="1",
               PREFLIGHT_RESUBMIT="1")
    first, state = slurm_netns.sbatch(SCRIPT, ["-N", "3", "--ntasks-per-node=1"], _training(tmp_path), env,
                                      cwd=tmp_path)
    out = _output(tmp_path, "preflight-train", first)
    # Nothing trained in the first job (the resubmitted one may already have, by the time this reads).
    assert "ExitCode=3:0" in state and not [t for t in _trained(tmp_path) if t[1] == first], state + out
    assert "NO CHOICE: 1 healthy host(s) of 3, 2 needed" in out, out
    assert f"dropped {n1}: NCCL008" in out and f"dropped {n2}: NCCL008" in out, out
    assert (tmp_path / f"preflight-{first}" / "kept-hosts.txt").read_text() == ""
    # Resubmitted without both, for 2 to 3 nodes (N, up to N+k): the two hosts left are enough.
    match = re.search(r"resubmitted as job (\d+) \(resubmission 1 of 1\), excluding (\S+)", out)
    assert match and match.group(2) == f"{n1},{n2}", out
    second = match.group(1)
    state = slurm_netns.wait(second)
    out2 = _output(tmp_path, "preflight-train", second)
    assert "ExitCode=0:0" in state, state + out2
    excluded = re.search(r"ExcNodeList=(\S+)", state)
    assert excluded and expand_hostlist(excluded.group(1)) == [n1, n2], state
    assert f"training on 2 of 2 node(s): {n3},{n4}, master {n3}:" in out2, out2
    assert _trained(tmp_path) == [[n3, second, n3, "2", "3"], [n4, second, n3, "2", "3"]], out2


def _private_storage(tmp_path: Path, node: str, path: Path, private: Path) -> str:
    """A PREFLIGHT command that runs preflight on `node` in its own mount namespace with `private` bound over
    `path` (the checkpoint path is a local directory there), elsewhere as it is."""
    wrapper = tmp_path / "private-storage-preflight"
    wrapper.write_text(f'#!/bin/sh\nif [ "$SLURMD_NODENAME" = {node} ]; then\n'
                       f"  exec unshare --mount sh -c 'mount --bind {private} {path} && exec \"$0\" \"$@\"' "
                       f'{BIN}/preflight "$@"\nfi\nexec {BIN}/preflight "$@"\n')
    wrapper.chmod(0o755)
    return str(wrapper)


def test_a_host_whose_checkpoint_path_is_private_is_dropped_and_training_runs_on_the_rest(
        slurm_netns: SlurmCluster, tmp_path: Path) -> None:
    """PREFLIGHT_STORAGE names the shared checkpoint directory; on the second node it is a private one."""
    n1, n2, n3 = slurm_netns.node_names[:3]
    path, private = tmp_path / "ckpt", tmp_path / "private"
    path.mkdir()
    private.mkdir()
    env = _env(slurm_netns, tmp_path, PREFLIGHT=_private_storage(tmp_path, n2, path, private), PREFLIGHT_SPARE="1",
               PREFLIGHT_STORAGE=str(path), PREFLIGHT_ARGS="--skip probe --storage-budget 1M")
    job, state = slurm_netns.sbatch(SCRIPT, ["-N", "3", "--ntasks-per-node=1"], _training(tmp_path), env,
                                    cwd=tmp_path)
    out = _output(tmp_path, "preflight-train", job)
    assert "ExitCode=0:0" in state, state + out
    assert f"dropped {n2}: STO001: " in out, out
    assert f"training on 2 of 3 node(s): {n1},{n3}, master {n1}:" in out, out
    assert [t[0] for t in _trained(tmp_path)] == [n1, n3]
    assert list(path.iterdir()) == [] and list(private.iterdir()) == []
