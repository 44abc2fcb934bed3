"""The fabric of 2026 in a real multi-rank run: NVLink domains, fabric health, IMEX, the mesh order against
the domains, RoCE settings and NIC firmware, each fault on one fake host, named with its ranks and host.

8 real ranks (env:// over a real c10d TCPStore, gloo), 2 on each of 4 fake hosts (real UTS and mount
namespaces, tests/helpers/hosts.py), with `--mesh tp4,pp2`. What cannot exist here is faked, data-driven,
at its one boundary each: NVML replayed from tests/fixtures/nvml/ (PREFLIGHT_NVML_REPLAY, read only by
preflight/lib/nvml_source.py), the IMEX channel nodes of a FAKE /dev (PREFLIGHT_DEV_ROOT, read only by
steps/gather/gpu_health.py), and the InfiniBand sysfs, a copy of tests/fixtures/sysfs/roce_healthy per
host, bind-mounted over the folder every rank gets as --sysfs-root.

- fa-a, fa-b: trays of NVL72 rack 2 (gb200_rack2.json on GPUs 0 and 2), ranks 0-3; fa-b has no IMEX channel
  (GPU035) and its mlx5_1's GID 3 is RoCE v1 (NIC005, NIC006).
- fa-c, fa-d: trays of rack 1, ranks 4-7; fa-c's mlx5_1 runs older firmware (NIC007); fa-d's GPU 0 reports
  degraded bandwidth (GPU022) and its GPU 3 registers while it is read again (in progress, a route
  recovery, then healthy): debounced, no finding.
- `--mesh tp4,pp2` puts each tp group on both racks: LAYOUT006 names `pp2,tp4`.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from preflight.reports import json as json_report
from tests.checks.test_config_multirank import assert_names, by_id, only, run_ok
from tests.helpers.hosts import fake_host
from tests.helpers.ranks import Placement, spawn_env_ranks

FIXTURES = Path(__file__).parents[1] / "fixtures"
RACK1 = "2d1c1f4e-7a3b-4c55-9e0e-5b8f3a6c9d01"
RACK2 = "7f0e9a41-3c2d-4e8b-a1f5-0d6c2b9e8a17"
# host -> (NVML fixture, CUDA_VISIBLE_DEVICES, IMEX channel, sysfs files rewritten in its copy)
HOSTS = {
    "fa-a": ("gb200_rack2", "0,2", True, {}),
    "fa-b": ("gb200_rack2", "0,2", False, {"class/infiniband/mlx5_1/ports/1/gid_attrs/types/3": "IB/RoCE v1"}),
    "fa-c": ("gb200_nvl72", "0,1", True, {"class/infiniband/mlx5_1/fw_ver": "28.36.1010"}),
    "fa-d": ("gb200_fabric_faults", "0,3", True, {}),
}
NEW_IDS = ("GPU014", "GPU022", "GPU034", "GPU035", "LAYOUT006", "NIC005", "NIC006", "NIC007")


@pytest.fixture(scope="module")
def fabric_run(tmp_path_factory: pytest.TempPathFactory) -> dict:
    tmp = tmp_path_factory.mktemp("fabric")
    view = tmp / "sysfs-view"
    view.mkdir()
    master = {"fa-master": "127.0.0.1"}
    place = {}
    for index, (host, (fixture, visible, imex, files)) in enumerate(HOSTS.items()):
        tree = shutil.copytree(FIXTURES / "sysfs" / "roce_healthy", tmp / f"sys-{host}")
        for path, text in files.items():
            (tree / path).write_text(text + "\n")
        channels = tmp / f"dev-{host}" / "nvidia-caps-imex-channels"
        channels.mkdir(parents=True)
        if imex:
            (channels / "channel0").touch()
        fake = fake_host(tmp, host, hosts=master, binds={tree: view})
        for local in (0, 1):
            place[2 * index + local] = Placement(fake, {
                "LOCAL_RANK": str(local), "LOCAL_WORLD_SIZE": "2", "CUDA_VISIBLE_DEVICES": visible,
                "PREFLIGHT_NVML_REPLAY": str(FIXTURES / "nvml" / f"{fixture}.json"),
                "PREFLIGHT_DEV_ROOT": str(channels.parent)})
    json_path, text_path = tmp / "report.json", tmp / "report.txt"
    runs = spawn_env_ranks(8, ["--json", str(json_path), "--text", str(text_path), "--html", str(tmp / "report.html"),
                               "--sysfs-root", str(view), "--mesh", "tp4,pp2", "--skip", "probe", "--skip", "network",
                               "--run-id", "fabric", "--timeout", "120"],
                           place=place, common_env={"NCCL_IB_GID_INDEX": "3", "NCCL_IB_TC": "106"},
                           master_addr="fa-master", timeout=300)
    return {"report": run_ok(runs, json_path), "runs": runs, "json": json_path, "text": text_path.read_text(),
            "html": (tmp / "report.html").read_text()}


def test_each_fabric_fault_names_its_ranks_and_host(fabric_run: dict) -> None:
    report = fabric_run["report"]
    degraded = only(report, "GPU022")
    assert_names(degraded, [6], ["fa-d"])
    assert degraded["message"] == "GPU 0 (00000008:01:00.0) of rank 6 on fa-d: NVLink fabric reports degraded bandwidth"
    imex = only(report, "GPU035")
    assert_names(imex, [2, 3], ["fa-b"])
    assert f"multi-node NVLink domain {RACK2}/32766 with 1 other host(s)" in imex["message"]
    assert_names(only(report, "NIC005"), [2, 3], ["fa-b"])  # a local check: both ranks of the host said it
    assert_names(only(report, "NIC006"), [2, 3], ["fa-b"])
    firmware = only(report, "NIC007")
    assert firmware["hosts"] == ["fa-c"] and "mlx5_1 28.36.1010; most MT4129 NICs of the job: 28.39.1002" in \
        firmware["message"]


def test_the_mesh_order_that_keeps_tp_inside_one_nvlink_domain(fabric_run: dict) -> None:
    order = only(fabric_run["report"], "LAYOUT006")
    assert order["message"] == (
        f"tp groups span NVLink domains with --mesh tp4,pp2: e.g. ranks 0,2,4,6 on {RACK1}/32766, {RACK2}/32766; "
        "--mesh pp2,tp4 keeps every tp group inside one NVLink domain (pp then spans NVLink domains instead)")
    assert_names(order, [0, 2, 4, 6], ["fa-a", "fa-b", "fa-c", "fa-d"])


def test_a_registration_that_settles_and_a_healthy_tray_are_silent(fabric_run: dict) -> None:
    report = fabric_run["report"]
    new = [f for f in report["findings"] if f["check_id"] in NEW_IDS]
    assert not [f for f in new if 7 in f["ranks"] and f["check_id"] != "LAYOUT006"], new  # fa-d's GPU 3 settled
    assert not [f for f in new if "fa-a" in f["hosts"] and f["check_id"] != "LAYOUT006"], new
    assert not by_id(report, "GPU014") and not by_id(report, "GPU034")
    settled = json_report.load(fabric_run["json"]).ranks[7].health.gpus[0].fabric
    assert settled is not None and settled.domain == f"{RACK1}/32766" and settled.waited_s > 0


def test_the_run_fails_and_excludes_the_faulty_hosts(fabric_run: dict) -> None:
    report = fabric_run["report"]
    assert report["exit_code"] == 3 and {r.returncode for r in fabric_run["runs"].values()} == {3}
    assert sorted(report["bad_hosts"]) == ["fa-b", "fa-d"]


def test_the_reports_show_each_nvlink_domain(fabric_run: dict) -> None:
    loaded = json_report.load(fabric_run["json"])
    assert [r.health.gpus[0].fabric.domain for r in loaded.ranks] == [f"{RACK2}/32766"] * 4 + [f"{RACK1}/32766"] * 4
    assert loaded.ranks[2].health.imex_channels == [] and loaded.ranks[0].health.imex_channels == ["channel0"]
    for text in (fabric_run["text"], fabric_run["html"]):
        assert f"{RACK2}/32766" in text and "fa-a, fa-b" in text and "fa-c, fa-d" in text
