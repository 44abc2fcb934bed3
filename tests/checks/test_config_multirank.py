"""Configuration checks in real multi-rank runs: each fault planted on one rank, for real.

Ranks are real processes (env:// over a real c10d TCPStore, torchrun for the restart). A
rank is put "on another host" with real namespaces (tests/helpers/hosts.py): its own
UTS hostname, /etc/hosts, /dev/shm tmpfs and `ulimit -l`. The only fake is InfiniBand, which
cannot exist here: a data-only sysfs tree, bind-mounted for one rank over the folder all ranks
get as --sysfs-root (so only that rank sees an RDMA device). Each launch costs
seconds of imports on 2 cores, so one launch plants many faults on different ranks.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

import psutil
import pytest

from tests.helpers.hosts import fake_host
from tests.helpers.ranks import PYTHON, Placement, base_env, plant_env, read_json, spawn_env_ranks, spread
from tests.helpers.tools import require

MY_PREFIXES = ("ENV", "LAYOUT", "NCCL", "SW", "SYS")


def write_ib_sysfs(root: Path) -> Path:
    """A data-only sysfs tree with one healthy IB device (no IB hardware exists here)."""
    port = root / "class" / "infiniband" / "mlx5_0" / "ports" / "1"
    port.mkdir(parents=True)
    for name, value in {"state": "4: ACTIVE", "phys_state": "5: LinkUp", "rate": "400 Gb/sec (4X NDR)",
                        "link_layer": "InfiniBand"}.items():
        (port / name).write_text(value + "\n")
    return root


def by_id(report: dict, check_id: str) -> list[dict]:
    """The report's findings of one check id."""
    return [f for f in report["findings"] if f["check_id"] == check_id]


def only(report: dict, check_id: str) -> dict:
    """The one finding of this id (fails with the report's findings when there is not exactly one)."""
    found = by_id(report, check_id)
    assert len(found) == 1, f"{check_id}: {found}\nall: {[(f['check_id'], f['message']) for f in report['findings']]}"
    return found[0]


def assert_names(finding: dict, ranks: list[int], hosts: list[str]) -> None:
    """The finding names exactly these ranks and hosts."""
    assert (finding["ranks"], finding["hosts"]) == (ranks, hosts), finding


def run_ok(runs: dict, report_path: Path) -> dict:
    """Every rank exited with the same code and rank 0 wrote its report."""
    codes = {rank: run.returncode for rank, run in runs.items()}
    assert report_path.exists(), {r: (run.stdout[-2000:], run.stderr[-2000:]) for r, run in runs.items()}
    assert len(set(codes.values())) == 1, codes
    return read_json(report_path)


@pytest.fixture(scope="module")
def per_rank_faults(tmp_path_factory: pytest.TempPathFactory) -> dict:
    """4 ranks on two fake hosts (pf3-a: ranks 0,1; pf3-b: ranks 2,3), a fault per rank."""
    tmp = tmp_path_factory.mktemp("faults")
    names = [n for n in psutil.net_if_addrs() if n != "lo"]
    require(bool(names), "needs one interface besides lo")
    sysfs = tmp / "sysfs-view"
    sysfs.mkdir()
    master = {"pf3-master": "127.0.0.1"}
    place = {
        0: Placement(fake_host(tmp, "pf3-a", hosts=master),
                     {"LOCAL_RANK": "0", "NCCL_SOCKET_IFNAME": "=lo", "GLOO_SOCKET_IFNAME": names[0]}),
        1: Placement(fake_host(tmp, "pf3-a", hosts=master, shm_size="64m"),
                     {"LOCAL_RANK": "1", "TORCH_NCCL_ASYNC_ERROR_HANDLING": "0", "NCCL_ASYNC_ERROR_HANDLING": "1",
                      "OMP_NUM_THREADS": "", "PREFLIGHT_JOB_ID": "pf3-other-job"}),
        # rank 2: its /etc/hosts sends pf3-master elsewhere (127.0.0.2 is loopback too, so it still
        # connects), it sees an IB device, and its memlock limit is 1 MiB.
        2: Placement(fake_host(tmp, "pf3-b", hosts={"pf3-master": "127.0.0.2"}, memlock_kib=1024,
                               binds={write_ib_sysfs(tmp / "sys-ib"): sysfs}),
                     {"LOCAL_RANK": "0", "TORCH_NCCL_ASYNC_ERROR_HANDLING": "7", "TORCH_NCCL_BLOCKING_WAIT": "1",
                      "TORCH_NCCL_DUMP_ON_TIMEOUT": "1", "NCCL_P2P_DISABLE": "1", "NCCL_NET_GDR_LEVEL": "FOO",
                      "CUDA_INJECTION64_PATH": "/opt/pf3/libinject.so", "NCCL_IB_DISABLE": "1",
                      "NCCL_IB_HCA": "mlx5_1"}),
        3: Placement(fake_host(tmp, "pf3-b", hosts=master),
                     {"LOCAL_RANK": "1", "NCCL_SOCKET_IFNAME": "pf3nosuch", "GLOO_SOCKET_IFNAME": "pf3nosuch",
                      "NCCL_DEBUG": "", "SLURM_RESTART_COUNT": "2", "GROUP_RANK": "1"}),
    }
    plant = plant_env(tmp, {1: "import torch\ntorch.__version__ = '2.12.0+pf3'"})
    common = {"LOCAL_WORLD_SIZE": "2", "NCCL_DEBUG": "WARN", "NCCL_IB_HCA": "mlx5_0", **plant}
    json_path = tmp / "report.json"
    runs = spawn_env_ranks(4, ["--json", str(json_path), "--sysfs-root", str(sysfs), "--backend", "nccl",
                               "--skip", "probe", "--run-id", "pf3-faults", "--timeout", "60"],
                           place=place, common_env=common, master_addr="pf3-master", timeout=180)
    return {"report": run_ok(runs, json_path), "runs": runs, "ifname": names[0]}


def test_nccl_async_error_handling_faults(per_rank_faults: dict) -> None:
    report = per_rank_faults["report"]
    assert_names(only(report, "NCCL001"), [1], ["pf3-a"])
    assert_names(only(report, "NCCL002"), [2], ["pf3-b"])
    assert "'7'" in only(report, "NCCL002")["message"]
    assert_names(only(report, "NCCL003"), [1], ["pf3-a"])
    assert_names(only(report, "NCCL004"), [1], ["pf3-a"])
    assert_names(only(report, "NCCL005"), [2], ["pf3-b"])
    assert_names(only(report, "NCCL006"), [2], ["pf3-b"])
    assert_names(only(report, "NCCL007"), [3], ["pf3-b"])
    assert report["exit_code"] == 3 and {r.returncode for r in per_rank_faults["runs"].values()} == {3}


def test_interface_and_transport_faults(per_rank_faults: dict) -> None:
    report = per_rank_faults["report"]
    assert_names(only(report, "NCCL008"), [3], ["pf3-b"])
    assert "pf3nosuch" in only(report, "NCCL008")["message"]
    assert_names(only(report, "NCCL009"), [3], ["pf3-b"])
    differ = only(report, "NCCL010")
    assert_names(differ, [0], ["pf3-a"])
    assert "selects lo" in differ["message"] and per_rank_faults["ifname"] in differ["message"]
    assert_names(only(report, "NCCL011"), [2], ["pf3-b"])
    assert "mlx5_0" in only(report, "NCCL011")["message"]
    assert_names(only(report, "NCCL012"), [2], ["pf3-b"])
    assert_names(only(report, "NCCL013"), [2], ["pf3-b"])


def test_process_and_limit_faults(per_rank_faults: dict) -> None:
    report = per_rank_faults["report"]
    assert_names(only(report, "ENV006"), [2], ["pf3-b"])
    assert_names(only(report, "ENV007"), [1], ["pf3-a"])
    assert_names(only(report, "SYS001"), [2], ["pf3-b"])  # ulimit -l 1024 KiB on a host with mlx5_0
    assert_names(only(report, "SYS002"), [1], ["pf3-a"])  # a 64 MiB /dev/shm tmpfs
    assert "64 MiB" in only(report, "SYS002")["message"]


def test_cross_rank_faults(per_rank_faults: dict) -> None:
    report = per_rank_faults["report"]
    software = only(report, "SW001")
    assert_names(software, [1], ["pf3-a"])
    assert "2.12.0+pf3" in software["message"]
    resolution = only(report, "ENV002")
    assert_names(resolution, [2], ["pf3-b"])
    assert "127.0.0.2" in resolution["message"]
    jobs = {f["data"]["field"]: f for f in by_id(report, "ENV001")}
    assert_names(jobs["job_id"], [1], ["pf3-a"])
    assert_names(jobs["launcher"], [3], ["pf3-b"])  # GROUP_RANK made rank 3 a "torchrun" rank
    drift = {f["data"]["variable"]: f for f in by_id(report, "ENV003")}
    assert_names(drift["NCCL_IB_HCA"], [2], ["pf3-b"])
    assert drift["NCCL_IB_HCA"]["message"] == "NCCL_IB_HCA: `mlx5_0` on 2 hosts, `mlx5_1` on pf3-b (rank 2)"
    assert_names(drift["OMP_NUM_THREADS"], [1], ["pf3-a"])
    restart = only(report, "ENV005")
    assert_names(restart, [3], ["pf3-b"])
    assert "restart #2" in restart["message"]
    other = only(report, "ENV004")
    assert "SLURM_RESTART_COUNT" in other["message"] and 3 in other["ranks"]


@pytest.fixture(scope="module")
def layout_faults(tmp_path_factory: pytest.TempPathFactory) -> dict:
    """4 ranks: pf3-a holds ranks 0 and 2 with the same LOCAL_RANK; pf3-b declares 2, runs 1;
    pf3-c declares LOCAL_WORLD_SIZE 1."""
    tmp = tmp_path_factory.mktemp("layout")
    hosts = {name: fake_host(tmp, name) for name in ("pf3-a", "pf3-b", "pf3-c")}
    place = {
        0: Placement(hosts["pf3-a"], {"LOCAL_RANK": "0", "LOCAL_WORLD_SIZE": "2"}),
        1: Placement(hosts["pf3-b"], {"LOCAL_RANK": "0", "LOCAL_WORLD_SIZE": "2"}),
        2: Placement(hosts["pf3-a"], {"LOCAL_RANK": "0", "LOCAL_WORLD_SIZE": "2"}),
        3: Placement(hosts["pf3-c"], {"LOCAL_RANK": "0", "LOCAL_WORLD_SIZE": "1"}),
    }
    json_path = tmp / "report.json"
    runs = spawn_env_ranks(4, ["--json", str(json_path), "--skip", "probe"], place=place, timeout=180)
    return run_ok(runs, json_path)


def test_layout_faults(layout_faults: dict) -> None:
    duplicate = only(layout_faults, "LAYOUT001")
    assert_names(duplicate, [0, 2], ["pf3-a"])
    assert "LOCAL_RANK 0 is held by ranks 0,2 on pf3-a" in duplicate["message"]
    assert_names(only(layout_faults, "LAYOUT002"), [3], ["pf3-c"])
    total = only(layout_faults, "LAYOUT003")
    assert_names(total, [1], ["pf3-b"])
    assert "add up to 5" in total["message"] and "pf3-b: 2 declared, 1 ran" in total["message"]
    assert_names(only(layout_faults, "LAYOUT004"), [0, 2], ["pf3-a"])
    assert layout_faults["exit_code"] == 3


def _my_findings(report: dict) -> list[tuple[str, str]]:
    return [(f["check_id"], f["message"]) for f in report["findings"] if f["check_id"].startswith(MY_PREFIXES)]


def test_clean_env_ranks_on_two_hosts_are_silent(tmp_path: Path) -> None:
    """Two fake hosts, two ranks each, NCCL in play (--backend nccl): no configuration finding."""
    hosts = [fake_host(tmp_path, "pf3-a"), fake_host(tmp_path, "pf3-b")]
    json_path = tmp_path / "report.json"
    runs = spawn_env_ranks(4, ["--json", str(json_path), "--backend", "nccl", "--skip", "probe"],
                           place=spread(hosts, 2), common_env={"NCCL_DEBUG": "WARN"}, timeout=180)
    report = run_ok(runs, json_path)
    assert _my_findings(report) == []
    # No NVIDIA driver here: --backend nccl makes the GPU checks could-not-run (GPU002), the run's only
    # unverified part, so the exit code is 4, not 0 (checks/gpu_health.py).
    not_run = {f["check_id"] for f in report["findings"] if f["severity"] in ("error", "could-not-run")}
    assert not_run == {"GPU002"}, report["findings"]
    assert report["exit_code"] == 4 and {r.returncode for r in runs.values()} == {4}


def test_clean_preflight_launch_is_silent(tmp_path: Path) -> None:
    """torch's own launcher (what `preflight launch` uses) sets its per-rank variables: no drift."""
    json_path = tmp_path / "report.json"
    done = subprocess.run([PYTHON, "-m", "preflight", "launch", "-n", "3", "--json", str(json_path)],
                          env=base_env(), capture_output=True, text=True, timeout=180)
    assert done.returncode == 0, done.stdout + done.stderr
    report = read_json(json_path)
    assert report["findings"] == [] and report["meta"]["world_size"] == 3


def test_torchrun_restart_is_info_in_the_header(tmp_path: Path) -> None:
    """A real elastic restart: rank 1 dies in attempt 0, torchrun restarts both workers."""
    plant = plant_env(tmp_path, {1: "if os.environ.get('TORCHELASTIC_RESTART_COUNT') == '0':\n"
                                    "    os._exit(17)"})
    json_path = tmp_path / "report.json"
    text_path = tmp_path / "report.txt"
    done = subprocess.run(
        [PYTHON, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2", "--max-restarts", "1",
         "--monitor-interval", "0.1", "-m", "preflight", "run", "--json", str(json_path), "--text", str(text_path),
         "--skip", "probe"],
        env=base_env(plant), capture_output=True, text=True, timeout=180, cwd=tmp_path)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    report = read_json(json_path)
    assert report["meta"]["restart_count"] == 1
    restart = only(report, "ENV005")
    assert restart["severity"] == "info" and restart["ranks"] == [0, 1] and "restart #1" in restart["message"]
    assert "restart #1" in text_path.read_text().splitlines()[1]  # the header line
    assert [f for f in _my_findings(report) if f[0] != "ENV005"] == []
