"""Agreement (launcher, job id, MASTER_ADDR's address), restarts, software versions."""

from __future__ import annotations

from preflight.checks.agreement import restart_count, restart_counts
from preflight.lib.grouping import distinct_networks
from preflight.model import MasterAddrResolution
from preflight.model.rank_env import RankEnv
from tests.helpers.facts import cluster, run


def test_same_job_is_silent() -> None:
    ranks = cluster(3, 2, world_job_id="42", network={"master_addr": {"addr": "n1", "ips": ["10.0.0.1"]}},
                    versions={"torch": "2.4.0", "python": "3.11.7"})
    assert [run(i, ranks) for i in ("ENV001", "ENV002", "ENV005", "SW001")] == [[], [], [], []]


def test_job_id_and_launcher_disagreement() -> None:
    ranks = cluster(3, 2, world_job_id="42")
    ranks[5].world.job_id = "43"
    ranks[0].world.launcher = "torchrun"
    found = {f.data["field"]: f for f in run("ENV001", ranks)}
    assert found["job_id"].ranks == [5] and found["job_id"].hosts == ["node003"]
    assert "`42` on 3 hosts, `43` on node003 (rank 5)" in found["job_id"].message
    assert found["launcher"].ranks == [0]


def test_master_addr_resolving_differently() -> None:
    ranks = cluster(4, 1, network={"master_addr": {"addr": "n1", "ips": ["10.0.0.1"], "error": ""}})
    ranks[2].network.master_addr = MasterAddrResolution("n1", ["127.0.1.1"])
    ranks[3].network.master_addr = MasterAddrResolution("n1", [], "gaierror")
    [finding] = run("ENV002", ranks)
    assert finding.ranks == [2, 3] and finding.hosts == ["node003", "node004"]
    assert "unresolvable on node004" in finding.message and "`127.0.1.1` on node003" in finding.message


def test_master_addr_read_once_per_host_section_names_every_rank_of_it() -> None:
    """Rank 0 holds one network section per host, shared by its ranks: ENV002 reads each once, then names
    every rank of the host whose section resolved MASTER_ADDR differently."""
    ranks = cluster(3, 2, network={"master_addr": {"addr": "n1", "ips": ["10.0.0.1"], "error": ""}})
    for first in (0, 2, 4):
        ranks[first + 1].network = ranks[first].network
    assert run("ENV002", ranks) == [] and len(distinct_networks(ranks)) == 3
    ranks[4].network.master_addr = MasterAddrResolution("n1", ["10.9.9.9"])
    [finding] = run("ENV002", ranks)
    assert finding.ranks == [4, 5] and set(finding.hosts) == {"node003"}, finding


def test_master_addr_text_differences_are_rank003s() -> None:
    ranks = cluster(2, 1)
    ranks[0].network.master_addr = MasterAddrResolution("a", ["10.0.0.1"])
    ranks[1].network.master_addr = MasterAddrResolution("b", ["10.0.0.2"])
    assert run("ENV002", ranks) == []


def test_restart_from_world_or_environment() -> None:
    ranks = cluster(2, 2)
    ranks[0].world.restart_count = 1
    ranks[3].env["SLURM_RESTART_COUNT"] = "3"
    [finding] = run("ENV005", ranks)
    assert finding.severity.value == "info" and finding.ranks == [0, 3] and "restart #3" in finding.message


def test_restarts_read_from_environments_as_rank_0_holds_them() -> None:
    """RankEnv rows (model/rank_env.py): the shared part's counter read once per shared dict, a rank's own
    variable winning over it, another shared part without one, the World's counter above them all."""
    shared = {"SLURM_RESTART_COUNT": "2", "PATH": "/bin"}
    ranks = cluster(3, 2)
    for facts in ranks:
        facts.env = RankEnv(shared, {"SLURM_PROCID": str(facts.rank)})
    ranks[1].env = RankEnv(shared, {"SLURM_RESTART_COUNT": "5"})
    ranks[2].env = RankEnv({"PATH": "/bin"}, {"SLURM_PROCID": "2"})
    ranks[3].env = RankEnv({"PATH": "/bin"}, {"TORCHELASTIC_RESTART_COUNT": " 1 "})
    ranks[5].world.restart_count = 7
    assert restart_counts(ranks) == [restart_count(f) for f in ranks] == [2, 5, 0, 1, 2, 7]
    [finding] = run("ENV005", ranks)
    assert finding.ranks == [0, 1, 3, 4, 5] and "restart #7" in finding.message


def test_software_mismatch_names_the_odd_hosts() -> None:
    ranks = cluster(4, 2, versions={"torch": "2.4.0+cu124", "torch_cuda": "12.4", "nccl": "2.21.5",
                                    "python": "3.11.7", "driver": "550.54"})
    ranks[7].versions.nccl = "2.20.5"
    ranks[6].versions.nccl = "2.20.5"
    ranks[0].versions.python = "3.10.12"
    ranks[2].versions.driver = "535.1"
    found = {f.data["component"]: f for f in run("SW001", ranks)}
    assert set(found) == {"nccl", "python", "driver"}
    assert found["nccl"].hosts == ["node004"] and found["nccl"].severity.value == "error"
    assert found["nccl"].message == "nccl version differs: `2.21.5` on 3 hosts, `2.20.5` on node004"
    assert found["python"].ranks == [0] and found["driver"].ranks == [2]


def test_loaded_libraries_that_differ_are_named_nccl_as_an_error_cudnn_and_cublas_as_warnings() -> None:
    """What a user sees when ranks mapped different libraries (steps/gather/versions.py reads them): a loaded
    NCCL that differs may hang the first collective (error, the probes do not start); a loaded cuDNN or cuBLAS
    gives other bits, not a hang (warning). A rank that loaded none (CPU, static build) is left out."""
    ranks = cluster(4, 2, versions={"torch": "2.4.0+cu124", "nccl": "2.21.5", "libnccl": "2.27.3",
                                    "libcudnn": "9.10.2", "libcublas": "12.8.4"})
    for rank in (6, 7):  # node004's LD_LIBRARY_PATH found another NCCL and cuBLAS
        ranks[rank].versions.libnccl, ranks[rank].versions.libcublas = "2.21.5", "12.4.5"
    ranks[1].versions.libcudnn = "9.1.0"
    ranks[2].versions.libnccl = ranks[3].versions.libnccl = ""  # node002 loaded no NCCL it could ask
    found = {f.data["component"]: f for f in run("SW001", ranks)}
    assert set(found) == {"libnccl", "libcudnn", "libcublas"}
    assert found["libnccl"].severity.value == "error" and found["libnccl"].hosts == ["node004"]
    assert found["libnccl"].message == "libnccl version differs: `2.27.3` on 2 hosts, `2.21.5` on node004"
    assert found["libcublas"].severity.value == "warn" and found["libcublas"].ranks == [6, 7]
    assert found["libcudnn"].severity.value == "warn" and found["libcudnn"].ranks == [1]
    alone = cluster(2, 1, versions={"libnccl": "2.27.3"})
    alone[1].versions.libnccl = ""
    assert run("SW001", alone) == []  # unknown on one rank is no disagreement
