"""GPU and NIC health in real multi-rank runs: each fault on one fake host, named with its rank and host.

Ranks are real processes (env:// over a real c10d TCPStore, gloo), each on a fake host (real UTS
and mount namespaces, tests/helpers/hosts.py). The two things that cannot exist here are faked,
data-driven, at their one boundary each: NVML, replayed from tests/fixtures/nvml/ through
PREFLIGHT_NVML_REPLAY (read only by preflight/lib/nvml_source.py), and the InfiniBand
sysfs, a fixture tree from tests/fixtures/sysfs/ bind-mounted per host over the folder every rank
gets as --sysfs-root. A planted hook (tests/helpers/ranks.plant_env) bumps one port's counter
after that rank's probes, between the two counter reads.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from preflight.model import Severity
from preflight.reports import charts
from preflight.reports import json as json_report
from tests.checks.test_config_multirank import assert_names, by_id, only, run_ok
from tests.helpers.hosts import fake_host
from tests.helpers.ranks import Placement, plant_env, spawn_env_ranks

FIXTURES = Path(__file__).parents[1] / "fixtures"

# host -> (NVML fixture, CUDA_VISIBLE_DEVICES, the GPU checks that must name it)
GPU_HOSTS = {
    "gh-remap": ("remap_pending", "3", {"GPU004", "GPU007"}),
    "gh-reset": ("recovery_reset", "2", {"GPU008"}),
    "gh-pcie": ("pcie_degraded", "4", {"GPU011"}),
    "gh-slow": ("hw_slowdown", "6", {"GPU009"}),
    "gh-proc": ("foreign_process", "1", {"GPU018"}),
    "gh-nvl": ("nvlink_inactive", "5", {"GPU031"}),
    "gh-ns": ("not_supported", "0", {"GPU021"}),
    "gh-lost": ("gpu_lost", "7", {"GPU003"}),
    "gh-xid": ("xid_events", "3", {"GPU040"}),  # drained after the probe step, reported with the verdict
}


@pytest.fixture(scope="module")
def gpu_run(tmp_path_factory: pytest.TempPathFactory) -> dict:
    """10 ranks, one per host: gh-ok replays a healthy HGX H100, every other host one fault."""
    tmp = tmp_path_factory.mktemp("gpu-health")
    master = {"gh-master": "127.0.0.1"}
    replay = "PREFLIGHT_NVML_REPLAY"
    healthy = str(FIXTURES / "nvml" / "healthy_h100x8.json")
    place = {0: Placement(fake_host(tmp, "gh-ok", hosts=master),
                          {"LOCAL_RANK": "0", "LOCAL_WORLD_SIZE": "1", replay: healthy})}
    for rank, (host, (fixture, visible, _)) in enumerate(GPU_HOSTS.items(), start=1):
        place[rank] = Placement(fake_host(tmp, host, hosts=master),
                                {"LOCAL_RANK": "0", "LOCAL_WORLD_SIZE": "1", "CUDA_VISIBLE_DEVICES": visible,
                                 replay: str(FIXTURES / "nvml" / f"{fixture}.json")})
    json_path = tmp / "report.json"
    runs = spawn_env_ranks(10, ["--json", str(json_path), "--html", str(tmp / "report.html"), "--skip", "probe",
                                "--skip", "network", "--run-id", "gpu-health", "--timeout", "90"],
                           place=place, master_addr="gh-master", timeout=240)
    return {"report": run_ok(runs, json_path), "runs": runs, "html": (tmp / "report.html").read_text(),
            "json": json_path}


def test_each_gpu_fault_names_its_rank_and_host(gpu_run: dict) -> None:
    report = gpu_run["report"]
    gpu = [f for f in report["findings"] if f["check_id"].startswith("GPU")]
    named = {(f["check_id"], tuple(f["hosts"])) for f in gpu}
    expected = {(check_id, (host,)) for host, (_, _, ids) in GPU_HOSTS.items() for check_id in ids}
    assert named == expected, [(f["check_id"], f["hosts"], f["message"]) for f in gpu]
    for rank, (host, (_, visible, ids)) in enumerate(GPU_HOSTS.items(), start=1):
        for check_id in ids:
            finding = only(report, check_id)
            assert_names(finding, [rank], [host])
            assert f"GPU {visible}" in finding["message"], finding
    assert "pid 4242 (python3 train_old.py)" in only(report, "GPU018")["message"]
    assert "not available on this GPU" in only(report, "GPU021")["message"]
    assert "XID 48 (double-bit ECC error); XID 74 (NVLink error) x2" in only(report, "GPU040")["message"]


def test_gpu_faults_fail_the_run_and_exclude_their_hosts(gpu_run: dict) -> None:
    report = gpu_run["report"]
    assert report["exit_code"] == 3 and {r.returncode for r in gpu_run["runs"].values()} == {3}
    error_hosts = sorted(host for host, (_, _, ids) in GPU_HOSTS.items() if host != "gh-ns")
    assert sorted(report["bad_hosts"]) == error_hosts
    assert not [f for f in report["findings"] if "gh-ok" in f["hosts"] and f["check_id"].startswith("GPU")]


def test_html_matrix_has_the_gpu_checks(gpu_run: dict) -> None:
    """The host x check matrix of the HTML report colours each faulty host's GPU cells."""
    assert "pf-matrix" in gpu_run["html"]
    report = json_report.load(gpu_run["json"])
    grid = charts.matrix(report, {facts.rank: facts.host for facts in report.ranks})
    assert grid is not None
    cell = {key: severity for key, (severity, _) in grid.cells.items()}
    error, info = Severity.ERROR, Severity.INFO
    for host, (_, _, ids) in GPU_HOSTS.items():
        for check_id in ids:
            assert cell[(host, check_id)] == (info if check_id == "GPU021" else error), (host, check_id)
    assert cell[("gh-ok", "GPU007")] == cell[("gh-remap", "GPU003")] == Severity.OK


NIC_HOSTS = {"nh-ok": "ib_healthy", "nh-mixed": "ib_mixed", "nh-noisy": "ib_noisy"}
BUMPED = "class/infiniband/mlx5_1/ports/1/counters/port_rcv_errors"


@pytest.fixture(scope="module")
def nic_run(tmp_path_factory: pytest.TempPathFactory) -> dict:
    """3 ranks on 3 hosts, each seeing its own sysfs tree; rank 2's port mlx5_1/1 takes 42 receive
    errors while its probes run (bumped after them, before the second read)."""
    tmp = tmp_path_factory.mktemp("nic-health")
    view = tmp / "sysfs-view"
    view.mkdir()
    master = {"nh-master": "127.0.0.1"}
    place = {}
    for rank, (host, tree) in enumerate(NIC_HOSTS.items()):
        copy = shutil.copytree(FIXTURES / "sysfs" / tree, tmp / f"sys-{host}")
        place[rank] = Placement(fake_host(tmp, host, hosts=master, binds={copy: view}),
                                {"LOCAL_RANK": "0", "LOCAL_WORLD_SIZE": "1"})
    bump = f"""
        import preflight.probes.orchestrate as _orchestrate
        _run_probes = _orchestrate.run_probes
        def _bumped(*args, **kwargs):
            outcome = _run_probes(*args, **kwargs)
            with open({str(view / BUMPED)!r}, "w") as counter:
                counter.write("42\\n")
            return outcome
        _orchestrate.run_probes = _bumped
    """
    common = {"NCCL_NET_GDR_LEVEL": "PHB", **plant_env(tmp, {2: bump})}
    json_path = tmp / "report.json"
    runs = spawn_env_ranks(3, ["--json", str(json_path), "--sysfs-root", str(view), "--skip", "network",
                               "--backend", "gloo", "--sizes", "64K", "--ops", "all_reduce", "--warmup", "1",
                               "--iters", "2", "--run-id", "nic-health", "--timeout", "90"],
                           place=place, common_env=common, master_addr="nh-master", timeout=240)
    return {"report": run_ok(runs, json_path), "runs": runs, "bumped": (tmp / "sys-nh-noisy" / BUMPED).read_text()}


def test_counter_increase_during_the_probes_is_an_error_naming_host_device_and_port(nic_run: dict) -> None:
    report = nic_run["report"]
    assert nic_run["bumped"] == "42\n"  # the planted bump ran, on the copy nh-noisy saw
    increased = only(report, "NIC001")
    assert_names(increased, [2], ["nh-noisy"])
    assert increased["message"] == "mlx5_1/1 on nh-noisy: error counters increased during the run: port_rcv_errors +42"
    assert report["exit_code"] == 3 and report["bad_hosts"] == ["nh-noisy"]
    assert {r.returncode for r in nic_run["runs"].values()} == {3}


def test_nic_warnings_name_their_host(nic_run: dict) -> None:
    report = nic_run["report"]
    assert_names(only(report, "NIC002"), [2], ["nh-noisy"])
    assert_names(only(report, "NIC004"), [2], ["nh-noisy"])
    assert_names(only(report, "NIC003"), [1], ["nh-mixed"])
    rates = by_id(report, "NET005")
    assert {tuple(f["hosts"]) for f in rates} == {("nh-mixed",)} and len(rates) == 2, rates  # sibling and cross-host
    assert not by_id(report, "NET002")
    assert not [f for f in report["findings"] if "nh-ok" in f["hosts"] and f["check_id"].startswith(("NIC", "NET"))]
