"""A run on fake hosts whose fake NCCL (tests/helpers/fake_nccl.py, written where NCCL would: the NCCL
communicator of tests/helpers/fake_cuda.py) falls back to sockets, or loses GPUDirect RDMA, on one host.

4 env:// ranks, 2 per fake host (UTS + mount namespaces), each host with its own sysfs tree of two
ACTIVE InfiniBand ports (tests/fixtures/sysfs/ib_healthy) and its own NCCL. preflight sets NCCL's
debug file before the first communicator, each rank reads its own log, rank 0 judges the accounts
against the facts: NCCL020 / NCCL021 name the host, its NICs and NCCL's reason, exit 3.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest

from tests.checks.test_config_multirank import assert_names, by_id, only, run_ok
from tests.helpers.fake_cuda import MODEL_ENV
from tests.helpers.hosts import fake_host
from tests.helpers.ranks import Placement, plant_env, spawn_env_ranks

ROOT = Path(__file__).resolve().parents[2]
HOSTS = ("nc-a", "nc-b")
NICS = [["mlx5_0", 1, "IB"], ["mlx5_1", 1, "IB"]]
MODEL = f"""
    import sys
    sys.path.insert(0, {str(ROOT)!r})
    from tests.helpers.fake_cuda import install_from_env
    install_from_env()
"""


def nccl_run(tmp: Path, name: str, nccl_b: dict[str, Any], env_b: dict[str, str] | None = None,
             common: dict[str, str] | None = None) -> tuple[dict, dict]:
    """4 ranks on 2 hosts; host nc-b's NCCL as `nccl_b` (NcclHost's fields) with `env_b`."""
    folder = tmp / name
    folder.mkdir()
    view = folder / "sysfs-view"
    view.mkdir()
    place = {}
    for index, host in enumerate(HOSTS):
        tree = shutil.copytree(ROOT / "tests" / "fixtures" / "sysfs" / "ib_healthy", folder / f"sys-{host}")
        nccl = {"nics": NICS, **(nccl_b if index == 1 else {})}
        model = {MODEL_ENV: json.dumps({"devices": 2, "host": str(index + 1), "free": 320 * 2**20,
                                        "rates": {"gemm": 0.002, "copy": 2.0, "host": 1.0}, "nccl": nccl})}
        for local in range(2):
            place[2 * index + local] = Placement(
                fake_host(folder, host, hosts={"nc-a": "127.0.0.1"}, binds={tree: view}),
                {"LOCAL_RANK": str(local), "LOCAL_WORLD_SIZE": "2", **model, **(env_b or {} if index else {})})
    report_path = folder / "report.json"
    html = folder / "report.html"
    runs = spawn_env_ranks(4, ["--json", str(report_path), "--html", str(html), "--sysfs-root", str(view),
                               "--skip", "network,gpu-probe", "--sizes", "64K", "--ops", "all_reduce",
                               "--warmup", "1", "--iters", "2", "--run-id", f"nccl-{name}", "--timeout", "90"],
                           place=place, master_addr="nc-a",
                           common_env={**plant_env(folder, dict.fromkeys(range(4), MODEL)), **(common or {})},
                           timeout=300)
    report = run_ok(runs, report_path)
    return report, {"runs": runs, "html": html.read_text()}


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, tuple[dict, dict]]:
    tmp = tmp_path_factory.mktemp("nccl-account")
    return {
        "healthy": nccl_run(tmp, "healthy", {}, common={"NCCL_DEBUG": "WARN"}),
        "socket": nccl_run(tmp, "socket", {}, env_b={"NCCL_IB_HCA": "mlx5_9"}),
        "gdr": nccl_run(tmp, "gdr", {"gdr": False, "dmabuf": False}),
    }


NCCL_IDS = ("NCCL020", "NCCL021", "NCCL022", "NCCL023", "NCCL024", "NCCL025")


def test_a_healthy_run_has_no_nccl_finding_and_shows_the_account(runs) -> None:
    report, extra = runs["healthy"]
    assert [f for f in report["findings"] if f["check_id"] in NCCL_IDS] == []
    assert report["exit_code"] == 0, report["findings"]
    nccl = report["nccl"]
    assert nccl["source"] == "captured" and nccl["ranks_read"] == 4 and nccl["ranks_unavailable"] == 0
    (profile,) = nccl["profiles"]
    assert sorted(profile["hosts"]) == list(HOSTS)
    account = profile["account"]
    assert (account["network"], account["gdr"], account["inter"]) == ("IB", True, ["NET/IB/GDRDMA"])
    assert account["intra"] == ["P2P/CUMEM"] and account["nics"] == ["mlx5_0:1/IB", "mlx5_1:1/IB"]
    assert {d["dim"] for d in nccl["dims"]} and "NCCL's account" in extra["html"]


def test_the_jobs_own_nccl_debug_output_is_kept(runs) -> None:
    """NCCL_DEBUG=WARN asked for NCCL's banner and warnings on stdout: those, and no INFO line of the capture."""
    _, extra = runs["healthy"]
    for run in extra["runs"].values():
        assert " NCCL INFO " not in run.stdout
        assert "NCCL version 2.26.2+cuda12.4\n" in run.stdout


def test_sockets_on_one_host_name_it_its_nics_and_ncclS_reason(runs) -> None:
    report, extra = runs["socket"]
    finding = only(report, "NCCL020")
    assert_names(finding, [2, 3], ["nc-b"])
    assert "mlx5_0:1" in finding["message"] and "NCCL_IB_HCA=mlx5_9 matched no device" in finding["message"]
    assert finding["severity"] == "error" and report["exit_code"] == 3 and "nc-b" in report["bad_hosts"]
    assert {r.returncode for r in extra["runs"].values()} == {3}
    assert not by_id(report, "NCCL021")  # GDR is off there because of the sockets: one finding, the cause


def test_gdr_off_on_one_host_names_it_and_the_reason(runs) -> None:
    report, _ = runs["gdr"]
    finding = only(report, "NCCL021")
    assert_names(finding, [2, 3], ["nc-b"])
    assert "nvidia-peermem not loaded" in finding["message"] and "while on at nc-a" in finding["message"]
    assert report["exit_code"] == 3
