"""World resolution: which launcher started this process, and where this rank sits.

Precedence, first match wins (each rule is a function below, tried in this order):

1. torchrun worker     TORCHELASTIC_RUN_ID, or GROUP_RANK with RANK and LOCAL_RANK
2. plain env://        RANK and WORLD_SIZE (explicit variables win over a scheduler's)
3. Open MPI            OMPI_COMM_WORLD_RANK
4. MPICH / Intel MPI   PMI_RANK (Hydra), unless srun set it (SLURM_PROCID equal to it)
5. Slurm srun          SLURM_PROCID with SLURM_NTASKS / SLURM_NPROCS
6. Kubeflow Trainer    PET_NNODES (the node-level init-container case: one process per node)
7. single process      nothing of the above

MPI wins over Slurm because mpirun inside an sbatch allocation inherits the batch step's
SLURM_PROCID=0 on every process. MASTER_ADDR defaults to the first host of the Slurm
nodelist, and an unset MASTER_PORT under Slurm is derived from SLURM_JOB_ID, so every rank
of a job agrees on it and two jobs on one host do not collide.

Every variable is read strictly and with bounds, before anything is built from it: integers
are ASCII digits only (`PMI_JOBID=²` is refused, not a crash), at most MAX_WORLD_SIZE ranks,
a Slurm nodelist or tasks-per-node list is counted before it is expanded, and any bad value
is one BadInput line (exit 2) that shows at most the start of the value.
"""

from __future__ import annotations

import os
import re
import socket
import zlib
from collections.abc import Mapping

from preflight.lib.errors import BadInput
from preflight.lib.hostlist import expand_hostlist
from preflight.lib.numbers import ascii_int, is_ascii_int, shown
from preflight.lib.slurm_layout import parse_tasks_per_node, slurm_rank_hosts
from preflight.model import World
from preflight.model.codec import valid_text

DEFAULT_MASTER_PORT = 29500
# Derived ports stay in 12000-31999: below Linux's default ephemeral range (32768-60999),
# so an outgoing connection cannot have taken the port first.
DERIVED_PORT_BASE = 12000
DERIVED_PORT_SPAN = 20000
MAX_WORLD_SIZE = 1_000_000  # ranks; any larger count in a launcher variable is refused
MAX_ADDR_CHARS = 255  # a DNS name is at most 253 characters
MAX_VALUE_CHARS = 1_000_000  # any launcher variable (a long Slurm nodelist fits)
MAX_ID_CHARS = 256  # job and run ids: they become store keys and folder names
_ID_NAMES = frozenset({"SLURM_JOB_ID", "SLURM_STEP_ID", "PMI_JOBID", "PMI_KVSNAME", "PMIX_NAMESPACE",
                       "OMPI_MCA_ess_base_jobid", "PET_RDZV_ID", "JOB_NAME", "TORCHELASTIC_RUN_ID", "PREFLIGHT_JOB_ID"})


class _EnvReader:
    """Reads variables, validates them where they enter, and remembers what was used."""

    def __init__(self, env: Mapping[str, str]) -> None:
        self.env = env
        self.used: dict[str, str] = {}

    def has(self, *names: str) -> bool:
        return all(self.env.get(n, "") != "" for n in names)

    def text(self, name: str, default: str | None = None) -> str | None:
        value = self.env.get(name)
        if value is None or value == "":
            return default
        value = valid_text(value)  # bytes that are not UTF-8 escaped, as the other ranks' reach rank 0
        limit = MAX_ID_CHARS if name in _ID_NAMES else MAX_VALUE_CHARS
        if len(value) > limit:
            raise BadInput(f"{name}={shown(value)} is longer than {limit} characters")
        self.used[name] = value
        return value

    def integer(self, name: str, default: int | None = None, minimum: int | None = 0) -> int | None:
        """ASCII digits only, at most MAX_WORLD_SIZE (every rank, size, count and port is below it)."""
        value = self.text(name)
        if value is None:
            return default
        return ascii_int(value, name, minimum=minimum, maximum=MAX_WORLD_SIZE)

    def required_int(self, name: str, minimum: int = 0) -> int:
        number = self.integer(name, minimum=minimum)
        if number is None:
            raise BadInput(f"{name} is not set")
        return number

    def first_int(self, names: tuple[str, ...], minimum: int = 0) -> int | None:
        for name in names:
            if self.has(name):
                return self.integer(name, minimum=minimum)
        return None


def _first_set(value: int | None, default: int) -> int:
    return default if value is None else value


def derive_port(job_id: str) -> int:
    """A port every rank of one job agrees on, different across jobs (deterministic)."""
    number = int(job_id) if is_ascii_int(job_id) else zlib.crc32(job_id.encode(errors="surrogatepass"))
    return DERIVED_PORT_BASE + number % DERIVED_PORT_SPAN


def _master_port(reader: _EnvReader, job_id: str, decisions: list[str]) -> int:
    port = reader.integer("MASTER_PORT", minimum=1)
    if port is not None:
        if port > 65535:
            raise BadInput(f"MASTER_PORT={shown(reader.used['MASTER_PORT'])} is not a TCP port (1-65535)")
        return port
    if job_id:
        port = derive_port(job_id)
        decisions.append(f"MASTER_PORT unset: derived {port} from job id {job_id}")
        return port
    decisions.append(f"MASTER_PORT unset: default {DEFAULT_MASTER_PORT}")
    return DEFAULT_MASTER_PORT


def _validate_master_addr(addr: str) -> str:
    addr = addr.strip()
    if not addr:
        raise BadInput("MASTER_ADDR is empty")
    if len(addr) > MAX_ADDR_CHARS:
        raise BadInput(f"MASTER_ADDR={shown(addr)} is longer than {MAX_ADDR_CHARS} characters")
    if re.fullmatch(r"[^\s\[\]]+:[0-9]+", addr) and addr.count(":") == 1:
        raise BadInput(f"MASTER_ADDR={shown(addr)} contains a port; put the port in MASTER_PORT")
    if re.search(r"\s|/", addr):
        raise BadInput(f"MASTER_ADDR={shown(addr)} is not a host name or address")
    return addr.strip("[]")


def _check_rank(world: World) -> World:
    for what, count in (("world size", world.world_size), ("local world size", world.local_world_size),
                        ("node count", world.num_nodes)):
        if count > MAX_WORLD_SIZE:
            raise BadInput(f"{what} {count} is more than the maximum {MAX_WORLD_SIZE} ({world.launcher})")
    if world.world_size < 1:
        raise BadInput(f"world size {world.world_size} must be at least 1 ({world.launcher})")
    if world.rank >= world.world_size:
        raise BadInput(f"rank {world.rank} is not below world size {world.world_size} ({world.launcher})")
    if world.local_world_size < 1:
        raise BadInput(f"local world size {world.local_world_size} must be at least 1 ({world.launcher})")
    if world.local_rank >= world.local_world_size:
        raise BadInput(
            f"local rank {world.local_rank} is not below local world size "
            f"{world.local_world_size} ({world.launcher})"
        )
    return world


def _from_torchrun(reader: _EnvReader, host: str) -> World | None:
    if not (reader.has("TORCHELASTIC_RUN_ID") or reader.has("GROUP_RANK", "RANK", "LOCAL_RANK")):
        return None
    decisions = ["torchrun worker: TORCHELASTIC_RUN_ID / GROUP_RANK set"]
    run_id = reader.text("TORCHELASTIC_RUN_ID", "") or ""
    restarts = reader.integer("TORCHELASTIC_RESTART_COUNT", 0) or 0
    world = World(
        launcher="torchrun",
        rank=reader.required_int("RANK"),
        world_size=reader.required_int("WORLD_SIZE", minimum=1),
        local_rank=reader.required_int("LOCAL_RANK"),
        local_world_size=reader.integer("LOCAL_WORLD_SIZE", 1, minimum=1) or 1,
        node_rank=reader.integer("GROUP_RANK", 0) or 0,
        num_nodes=reader.integer("GROUP_WORLD_SIZE", 1, minimum=1) or 1,
        node_rank_given=reader.has("GROUP_RANK"),
        host=host,
        master_addr=_validate_master_addr(reader.text("MASTER_ADDR", "127.0.0.1") or ""),
        master_port=_master_port(reader, "", decisions),
        job_id=reader.text("SLURM_JOB_ID", "") or run_id,
        run_id=f"torchrun-{run_id}-{restarts}",
        restart_count=restarts,
        use_agent_store=reader.text("TORCHELASTIC_USE_AGENT_STORE", "") == "True",
        decisions=decisions,
    )
    return world


def _from_env(reader: _EnvReader, host: str) -> World | None:
    if not reader.has("RANK", "WORLD_SIZE"):
        return None
    decisions = ["env://: RANK and WORLD_SIZE set"]
    job_id = reader.text("PREFLIGHT_JOB_ID", "") or reader.text("SLURM_JOB_ID", "") or ""
    world_size = reader.required_int("WORLD_SIZE", minimum=1)
    local_world = reader.integer("LOCAL_WORLD_SIZE", None, minimum=1)
    if local_world is None:
        local_world = world_size
        decisions.append("LOCAL_WORLD_SIZE unset: assumed every rank is on this host")
    rank = reader.required_int("RANK")
    return World(
        launcher="env",
        rank=rank,
        world_size=world_size,
        local_rank=reader.integer("LOCAL_RANK", rank % local_world) or 0,
        local_world_size=local_world,
        node_rank=_first_set(reader.first_int(("GROUP_RANK", "NODE_RANK")), rank // local_world),
        num_nodes=max(1, -(-world_size // local_world)),
        node_rank_given=reader.has("GROUP_RANK") or reader.has("NODE_RANK"),
        host=host,
        master_addr=_validate_master_addr(reader.text("MASTER_ADDR", "127.0.0.1") or ""),
        master_port=_master_port(reader, "", decisions),
        job_id=job_id,
        run_id=f"env-{job_id}" if job_id else "env",
        decisions=decisions,
    )


def _from_open_mpi(reader: _EnvReader, host: str) -> World | None:
    if not reader.has("OMPI_COMM_WORLD_RANK"):
        return None
    decisions = ["Open MPI: OMPI_COMM_WORLD_RANK set"]
    world_size = reader.required_int("OMPI_COMM_WORLD_SIZE", minimum=1)
    local_world = reader.integer("OMPI_COMM_WORLD_LOCAL_SIZE", 1, minimum=1) or 1
    job_id = reader.text("PMIX_NAMESPACE", "") or reader.text("OMPI_MCA_ess_base_jobid", "") or ""
    return World(
        launcher="mpirun",
        rank=reader.required_int("OMPI_COMM_WORLD_RANK"),
        world_size=world_size,
        local_rank=reader.integer("OMPI_COMM_WORLD_LOCAL_RANK", 0) or 0,
        local_world_size=local_world,
        # OMPI_COMM_WORLD_NODE_RANK is the rank among the processes of this node (a local
        # rank), not the node's index: Open MPI names no node index, so derive it.
        node_rank=reader.required_int("OMPI_COMM_WORLD_RANK") // local_world,
        num_nodes=max(1, -(-world_size // local_world)),
        host=host,
        master_addr=_mpi_master_addr(reader, world_size, local_world, decisions),
        master_port=_master_port(reader, job_id, decisions),
        job_id=job_id,
        run_id=f"mpirun-{job_id}",
        decisions=decisions,
    )


def _mpi_master_addr(reader: _EnvReader, world_size: int, local_world: int, decisions: list[str]) -> str:
    addr = reader.text("MASTER_ADDR")
    if addr is not None:
        return _validate_master_addr(addr)
    if local_world == world_size:
        decisions.append("MASTER_ADDR unset and every rank is on this host: 127.0.0.1")
        return "127.0.0.1"
    raise BadInput(
        "MASTER_ADDR is not set and mpirun spans several hosts; export it "
        "(e.g. mpirun -x MASTER_ADDR=$(hostname) ...)"
    )


def _from_hydra(reader: _EnvReader, host: str) -> World | None:
    if not reader.has("PMI_RANK"):
        return None
    if (reader.has("SLURM_PROCID") and reader.env["SLURM_PROCID"] == reader.env["PMI_RANK"]
            and not batch_step(reader.env)):  # in the batch script, mpiexec set it (its rank 0 inherits PROCID=0)
        return None  # srun's PMI plugin set it: the Slurm rule describes this better
    decisions = ["MPICH/Intel MPI (Hydra): PMI_RANK set"]
    world_size = reader.required_int("PMI_SIZE", minimum=1)
    local_world = reader.integer("MPI_LOCALNRANKS", 1, minimum=1) or 1
    rank = reader.required_int("PMI_RANK")
    job_id = reader.text("PMI_JOBID", "") or reader.text("PMI_KVSNAME", "") or ""
    return World(
        launcher="mpich",
        rank=rank,
        world_size=world_size,
        local_rank=reader.integer("MPI_LOCALRANKID", 0) or 0,
        local_world_size=local_world,
        node_rank=rank // local_world,
        num_nodes=max(1, -(-world_size // local_world)),
        host=host,
        master_addr=_mpi_master_addr(reader, world_size, local_world, decisions),
        master_port=_master_port(reader, job_id, decisions),
        job_id=job_id,
        run_id=f"mpich-{job_id}",
        decisions=decisions,
    )


BATCH_STEP_IDS = ("4294967294", "batch")  # SLURM_BATCH_SCRIPT, as a number or by name


def batch_step(env: Mapping[str, str]) -> bool:
    """True in an sbatch script outside srun: Slurm's batch step, which is one process of the job.

    Its variables say SLURM_PROCID=0 and the job's SLURM_NTASKS, as rank 0 of an srun step would;
    run there, preflight would wait for tasks that never start and blame rank 0's own host.
    Slurm 22.05 sets no step id in the batch step (srun always does); others say 4294967294 or batch.
    """
    step = env.get("SLURM_STEP_ID") or env.get("SLURM_STEPID") or ""
    return step in BATCH_STEP_IDS or (not step and bool(env.get("SLURM_JOB_ID")))


def _from_slurm(reader: _EnvReader, host: str) -> World | None:
    if not (reader.has("SLURM_PROCID") and (reader.has("SLURM_NTASKS") or reader.has("SLURM_NPROCS"))):
        return None
    decisions = ["Slurm: SLURM_PROCID and SLURM_NTASKS set"]
    job_id = reader.text("SLURM_JOB_ID", "") or ""
    step_id = reader.text("SLURM_STEP_ID", "") or ""
    world_size = reader.first_int(("SLURM_NTASKS", "SLURM_NPROCS"), minimum=1) or 1
    if world_size > 1 and batch_step(reader.env):
        raise BadInput(f"run preflight under srun (this is the batch script's own step): it is one process, "
                       f"not the job's {world_size} tasks; `srun preflight ...` starts them all")
    nodelist_text = reader.text("SLURM_STEP_NODELIST") or reader.text("SLURM_JOB_NODELIST") or ""
    nodes = expand_hostlist(nodelist_text)
    tasks_text = reader.text("SLURM_STEP_TASKS_PER_NODE") or reader.text("SLURM_TASKS_PER_NODE")
    node_rank = reader.integer("SLURM_NODEID", 0) or 0
    expected: dict[int, str] = {}
    local_world = reader.integer("SLURM_NTASKS_PER_NODE", None, minimum=1)
    if nodes and tasks_text:
        tasks = parse_tasks_per_node(tasks_text)
        if len(tasks) == len(nodes) and sum(tasks) == world_size:
            distribution = reader.text("SLURM_DISTRIBUTION", "block") or "block"
            expected = slurm_rank_hosts(nodes, tasks, distribution)
            if node_rank < len(tasks):
                local_world = tasks[node_rank]
    if local_world is None:
        local_world = world_size
    master_addr = reader.text("MASTER_ADDR")
    if master_addr is None:
        master_addr = nodes[0] if nodes else "127.0.0.1"
        decisions.append(f"MASTER_ADDR unset: first host of the nodelist, {master_addr}")
    return World(
        launcher="slurm",
        rank=reader.required_int("SLURM_PROCID"),
        world_size=world_size,
        local_rank=reader.integer("SLURM_LOCALID", 0) or 0,
        local_world_size=local_world,
        node_rank=node_rank,
        num_nodes=reader.first_int(("SLURM_STEP_NUM_NODES", "SLURM_NNODES"), minimum=1) or max(1, len(nodes)),
        node_rank_given=reader.has("SLURM_NODEID"),
        host=host,
        master_addr=_validate_master_addr(master_addr),
        master_port=_master_port(reader, job_id, decisions),
        job_id=job_id,
        run_id=f"slurm-{job_id}.{step_id}",
        restart_count=reader.integer("SLURM_RESTART_COUNT", 0) or 0,
        expected_hosts=expected,
        decisions=decisions,
    )


def _from_kubeflow(reader: _EnvReader, host: str) -> World | None:
    if not reader.has("PET_NNODES"):
        return None
    decisions = ["Kubeflow Trainer: PET_NNODES set, one preflight process per node"]
    nnodes_text = reader.text("PET_NNODES") or ""
    # torchrun accepts "MIN:MAX" for elastic jobs; the node-level preflight needs the max.
    nnodes_value = nnodes_text.split(":")[-1]
    if not is_ascii_int(nnodes_value) or not 1 <= int(nnodes_value) <= MAX_WORLD_SIZE:
        raise BadInput(f"PET_NNODES={shown(nnodes_text)} is not a positive integer (at most {MAX_WORLD_SIZE})")
    nnodes = int(nnodes_value)
    node_rank = reader.first_int(("PET_NODE_RANK", "JOB_COMPLETION_INDEX"))
    if node_rank is None:
        raise BadInput("Kubeflow: neither PET_NODE_RANK nor JOB_COMPLETION_INDEX is set")
    nproc = reader.text("PET_NPROC_PER_NODE", "auto") or "auto"
    if nproc not in ("auto", "cpu", "gpu") and not is_ascii_int(nproc):
        raise BadInput(f"PET_NPROC_PER_NODE={shown(nproc)} must be a number, auto, cpu or gpu")
    decisions.append(f"PET_NPROC_PER_NODE={nproc}: the training's ranks per node, recorded only")
    job_id = reader.text("PET_RDZV_ID", "") or reader.text("JOB_NAME", "") or ""
    master_addr = reader.text("PET_MASTER_ADDR") or reader.text("MASTER_ADDR") or "127.0.0.1"
    port_reader = _EnvReader({"MASTER_PORT": reader.text("PET_MASTER_PORT") or reader.text("MASTER_PORT") or ""})
    return World(
        launcher="kubeflow",
        rank=node_rank,
        world_size=nnodes,
        local_rank=0,
        local_world_size=1,
        node_rank=node_rank,
        num_nodes=nnodes,
        node_rank_given=True,
        host=host,
        master_addr=_validate_master_addr(master_addr),
        master_port=_master_port(port_reader, job_id, decisions),
        job_id=job_id,
        run_id=f"kubeflow-{job_id}",
        decisions=decisions,
    )


# Launchers whose preflight runs one process per node, not as the training's ranks.
_NODE_LEVEL = {
    "kubeflow": "a Kubeflow init container runs one preflight per pod (PET_* only, no torchrun), so its "
                "checks and probes are node level; the training's ranks do not exist yet",
}


def node_level(world: World) -> str:
    """Why this world is node level (one preflight per node, not the training's ranks); "" when it is not."""
    return _NODE_LEVEL.get(world.launcher, "")


def _single(reader: _EnvReader, host: str) -> World:
    return World(
        launcher="single",
        rank=0,
        world_size=1,
        host=host,
        master_addr="127.0.0.1",
        master_port=0,  # any free port: nobody else needs to find the store
        run_id="single",
        decisions=["no launcher variables: a single process"],
    )


_RULES = (_from_torchrun, _from_env, _from_open_mpi, _from_hydra, _from_slurm, _from_kubeflow)


def resolve_world(env: Mapping[str, str] | None = None, host: str | None = None) -> World:
    """Work out the World from the launcher's variables. Raises BadInput on bad values."""
    reader = _EnvReader(os.environ if env is None else env)
    # Under Slurm the node's Slurm name is what `sbatch --exclude` takes; prefer it.
    host = host or reader.text("SLURMD_NODENAME") or socket.gethostname()
    for rule in _RULES:
        world = rule(reader, host)
        if world is not None:
            break
    else:
        world = _single(reader, host)
    world.raw = dict(reader.used)
    return _check_rank(world)
