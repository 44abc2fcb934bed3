"""World resolution from every launcher's variables, the precedence, and bad input."""

from __future__ import annotations

import pytest

from preflight.lib.errors import BadInput
from preflight.steps.launchers import DERIVED_PORT_BASE, derive_port, resolve_world

TORCHRUN = {
    "TORCHELASTIC_RUN_ID": "abc", "RANK": "5", "LOCAL_RANK": "1", "WORLD_SIZE": "8", "LOCAL_WORLD_SIZE": "4",
    "GROUP_RANK": "1", "GROUP_WORLD_SIZE": "2", "MASTER_ADDR": "head", "MASTER_PORT": "29400",
    "TORCHELASTIC_RESTART_COUNT": "2", "TORCHELASTIC_USE_AGENT_STORE": "True",
}
SLURM = {
    "SLURM_JOB_ID": "4242", "SLURM_STEP_ID": "0", "SLURM_PROCID": "5", "SLURM_LOCALID": "1", "SLURM_NTASKS": "8",
    "SLURM_NODEID": "1", "SLURM_NNODES": "2", "SLURM_JOB_NODELIST": "gpu[001-002]",
    "SLURM_STEP_NODELIST": "gpu[001-002]", "SLURM_STEP_TASKS_PER_NODE": "4(x2)", "SLURM_RESTART_COUNT": "1",
}
OMPI = {
    "OMPI_COMM_WORLD_RANK": "3", "OMPI_COMM_WORLD_SIZE": "4", "OMPI_COMM_WORLD_LOCAL_RANK": "3",
    "OMPI_COMM_WORLD_LOCAL_SIZE": "4", "OMPI_COMM_WORLD_NODE_RANK": "0", "PMIX_NAMESPACE": "prterun-vm-77@1",
}
HYDRA = {"PMI_RANK": "6", "PMI_SIZE": "8", "MPI_LOCALRANKID": "2", "MPI_LOCALNRANKS": "4", "MASTER_ADDR": "n1"}
KUBEFLOW = {
    "PET_NNODES": "4", "PET_NPROC_PER_NODE": "auto", "PET_NODE_RANK": "2", "PET_MASTER_ADDR": "trainer-node-0",
    "PET_MASTER_PORT": "29400", "JOB_COMPLETION_INDEX": "2",
}


def test_torchrun_worker() -> None:
    world = resolve_world(TORCHRUN, host="h")
    assert (world.launcher, world.rank, world.local_rank, world.world_size, world.local_world_size) == (
        "torchrun", 5, 1, 8, 4)
    assert (world.node_rank, world.num_nodes, world.master_addr, world.master_port) == (1, 2, "head", 29400)
    assert world.use_agent_store and world.restart_count == 2
    assert world.run_id == "torchrun-abc-2"
    assert world.raw["TORCHELASTIC_RUN_ID"] == "abc"


def test_torchrun_wins_over_slurm() -> None:
    world = resolve_world({**SLURM, **TORCHRUN}, host="h")
    assert world.launcher == "torchrun" and world.rank == 5 and world.job_id == "4242"


def test_plain_env() -> None:
    world = resolve_world({"RANK": "2", "WORLD_SIZE": "4", "MASTER_ADDR": "10.0.0.1", "MASTER_PORT": "1234"}, host="h")
    assert (world.launcher, world.rank, world.world_size, world.master_addr, world.master_port) == (
        "env", 2, 4, "10.0.0.1", 1234)
    assert world.local_rank == 2 and world.local_world_size == 4


def test_slurm_layout_master_and_port() -> None:
    world = resolve_world(SLURM, host="gpu002")
    assert (world.launcher, world.rank, world.local_rank, world.world_size, world.local_world_size) == (
        "slurm", 5, 1, 8, 4)
    assert world.node_rank == 1 and world.num_nodes == 2 and world.restart_count == 1
    assert world.master_addr == "gpu001"
    assert world.master_port == derive_port("4242") == DERIVED_PORT_BASE + 4242
    assert world.expected_hosts[3] == "gpu001" and world.expected_hosts[4] == "gpu002"
    assert world.run_id == "slurm-4242.0"
    assert any("MASTER_ADDR unset" in d for d in world.decisions)


def test_slurm_port_same_within_job_different_across_jobs() -> None:
    ports = {resolve_world({**SLURM, "SLURM_PROCID": str(r)}, host="x").master_port for r in range(8)}
    assert len(ports) == 1
    assert resolve_world({**SLURM, "SLURM_JOB_ID": "4243"}, host="x").master_port not in ports


def test_slurm_cyclic_distribution() -> None:
    world = resolve_world({**SLURM, "SLURM_DISTRIBUTION": "cyclic"}, host="x")
    assert [world.expected_hosts[r] for r in range(4)] == ["gpu001", "gpu002", "gpu001", "gpu002"]


def test_open_mpi_wins_over_inherited_slurm() -> None:
    world = resolve_world({**SLURM, "SLURM_PROCID": "0", **OMPI}, host="h")
    assert world.launcher == "mpirun" and world.rank == 3 and world.world_size == 4
    assert world.master_addr == "127.0.0.1"
    assert world.master_port == derive_port("prterun-vm-77@1")


def test_open_mpi_across_hosts_needs_master_addr() -> None:
    with pytest.raises(BadInput, match="MASTER_ADDR"):
        resolve_world({**OMPI, "OMPI_COMM_WORLD_SIZE": "8"}, host="h")


def test_hydra() -> None:
    world = resolve_world(HYDRA, host="h")
    assert (world.launcher, world.rank, world.world_size, world.local_rank, world.local_world_size) == (
        "mpich", 6, 8, 2, 4)
    assert world.node_rank == 1 and world.master_addr == "n1"


def test_pmi_set_by_srun_is_slurm() -> None:
    world = resolve_world({**SLURM, "PMI_RANK": "5", "PMI_SIZE": "8"}, host="h")
    assert world.launcher == "slurm"


def test_kubeflow_node_level() -> None:
    world = resolve_world(KUBEFLOW, host="pod-2")
    assert (world.launcher, world.rank, world.world_size, world.local_world_size) == ("kubeflow", 2, 4, 1)
    assert (world.master_addr, world.master_port) == ("trainer-node-0", 29400)


def test_kubeflow_job_completion_index_only() -> None:
    env = {k: v for k, v in KUBEFLOW.items() if k != "PET_NODE_RANK"}
    env["JOB_COMPLETION_INDEX"] = "3"
    assert resolve_world(env, host="p").rank == 3


def test_single_process() -> None:
    world = resolve_world({}, host="laptop")
    assert (world.launcher, world.rank, world.world_size, world.master_port) == ("single", 0, 1, 0)


@pytest.mark.parametrize(
    ("env", "message"),
    [
        ({"RANK": "abc", "WORLD_SIZE": "2"}, "RANK='abc' is not an integer"),
        ({"RANK": "0", "WORLD_SIZE": "0"}, "WORLD_SIZE='0' must be >= 1"),
        ({"RANK": "4", "WORLD_SIZE": "4"}, "rank 4 is not below world size 4"),
        ({"RANK": "0", "WORLD_SIZE": "2", "LOCAL_RANK": "-1"}, "LOCAL_RANK='-1' must be >= 0"),
        ({"RANK": "0", "WORLD_SIZE": "2", "MASTER_PORT": "99999"}, "MASTER_PORT='99999' is not a TCP port"),
        ({"RANK": "0", "WORLD_SIZE": "2", "MASTER_ADDR": "host:29500"}, "contains a port"),
        ({"RANK": "0", "WORLD_SIZE": "2", "MASTER_ADDR": " "}, "MASTER_ADDR is empty"),
        ({**SLURM, "SLURM_STEP_NODELIST": "gpu[1-"}, "unclosed"),
        ({**KUBEFLOW, "PET_NPROC_PER_NODE": "many"}, "PET_NPROC_PER_NODE"),
    ],
)
def test_bad_input_names_variable_and_value(env: dict[str, str], message: str) -> None:
    with pytest.raises(BadInput, match=message.replace("(", r"\(").replace("[", r"\[")):
        resolve_world(env, host="h")


@pytest.mark.parametrize(("env", "given"), [
    (TORCHRUN, True), (SLURM, True), (KUBEFLOW, True), (OMPI, False), (HYDRA, False),
    ({"RANK": "2", "WORLD_SIZE": "4"}, False), ({"RANK": "2", "WORLD_SIZE": "4", "NODE_RANK": "1"}, True),
])
def test_node_rank_given_only_where_the_launcher_names_the_node(env: dict[str, str], given: bool) -> None:
    assert resolve_world(env, host="h").node_rank_given is given


def test_open_mpi_node_rank_is_derived_not_its_per_node_rank() -> None:
    # OMPI_COMM_WORLD_NODE_RANK is a rank among the node's processes (3 here), not a node index.
    world = resolve_world({**OMPI, "OMPI_COMM_WORLD_NODE_RANK": "3", "OMPI_COMM_WORLD_SIZE": "8",
                           "OMPI_COMM_WORLD_RANK": "7", "MASTER_ADDR": "n1"}, host="h")
    assert world.node_rank == 1


@pytest.mark.parametrize("step", [{"SLURM_STEP_ID": "4294967294"}, {"SLURM_STEP_ID": "batch"}, {}])
def test_slurms_batch_step_is_refused_with_run_it_under_srun(step: dict[str, str]) -> None:
    """In an sbatch script outside srun, SLURM_PROCID=0 and the job's SLURM_NTASKS look like rank 0 of
    a step; waiting for the other tasks would blame rank 0's own host (issue 45)."""
    batch = {k: v for k, v in SLURM.items() if k != "SLURM_STEP_ID"} | {"SLURM_PROCID": "0"} | step
    with pytest.raises(BadInput, match=r"^run preflight under srun \(this is the batch script's own step\)"):
        resolve_world(batch, host="x")
    assert resolve_world({**SLURM, "SLURM_PROCID": "0"}, host="x").launcher == "slurm"  # an srun step
    alone = {"SLURM_JOB_ID": "7", "SLURM_PROCID": "0", "SLURM_NTASKS": "1", "SLURM_JOB_NODELIST": "x", **step}
    assert resolve_world(alone, host="x").world_size == 1  # a one-task batch step is the whole job


def test_mpiexec_inside_a_batch_script_is_hydra_not_the_batch_step() -> None:
    """Hydra's rank 0 in an sbatch script inherits the batch step's SLURM_PROCID=0: it is mpiexec's rank."""
    batch = {"SLURM_JOB_ID": "7", "SLURM_PROCID": "0", "SLURM_NTASKS": "4", "SLURM_JOB_NODELIST": "x"}
    hydra = {"PMI_RANK": "0", "PMI_SIZE": "4", "MPI_LOCALNRANKS": "4"}
    world = resolve_world({**batch, **hydra}, host="x")
    assert (world.launcher, world.world_size) == ("mpich", 4)
