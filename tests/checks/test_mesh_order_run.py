"""One cause, one finding: a tp group split across hosts where another --mesh order keeps it on one host is
LAYOUT006's (before the probes, with the order that fixes it), not also BW008's after them.

4 real ranks (env://, gloo) placed cyclically on 2 fake hosts (real UTS namespaces, tests/helpers/hosts.py):
ranks 0 and 2 on pfm-a, 1 and 3 on pfm-b. `--mesh dp2,tp2` makes tp groups [0,1] and [2,3], each across both
hosts; `--mesh tp2,dp2` would keep them on one host. Where no order helps, BW008 is still said
(tests/probes/test_probes_netns.py: one rank per host)."""

from __future__ import annotations

from pathlib import Path

import pytest

from preflight.checks.mesh_order import leave_to_layout
from preflight.model import Finding, Severity
from tests.checks.test_config_multirank import by_id, only, run_ok
from tests.helpers.hosts import fake_host
from tests.helpers.ranks import Placement, spawn_env_ranks


def _finding(check_id: str, dim: str) -> Finding:
    return Finding(check_id, Severity.WARN, f"{check_id} {dim}", data={"dim": dim})


def test_bw008_is_left_to_layout006_for_the_dimension_it_named() -> None:
    before = [_finding("LAYOUT006", "tp"), _finding("ENV003", "")]
    probes = [_finding("BW008", "tp"), _finding("BW003", "tp")]
    assert [f.check_id for f in leave_to_layout(before, probes)] == ["BW003"]
    assert [f.check_id for f in leave_to_layout([_finding("LAYOUT006", "cp")], probes)] == ["BW008", "BW003"]
    assert [f.check_id for f in leave_to_layout([], probes)] == ["BW008", "BW003"]  # LAYOUT006 off or silent
    assert [f.check_id for f in leave_to_layout(before, probes, ["layout006"])] == ["BW008", "BW003"]


@pytest.mark.timeout(300)  # does-not-hang bound: one run of four ranks with probes on 2 shared cores
def test_a_tp_group_across_hosts_that_an_order_fixes_is_said_once(tmp_path: Path) -> None:
    hosts = {name: fake_host(tmp_path, name, hosts={"pfm-master": "127.0.0.1"}) for name in ("pfm-a", "pfm-b")}
    place = {rank: Placement(hosts["pfm-a" if rank % 2 == 0 else "pfm-b"],
                             {"LOCAL_RANK": str(rank // 2), "LOCAL_WORLD_SIZE": "2"}) for rank in range(4)}
    out = tmp_path / "report.json"
    runs = spawn_env_ranks(4, ["--mesh", "dp2,tp2", "--ops", "all_reduce", "--sizes", "64KiB", "--warmup", "1",
                               "--iters", "3", "--skip", "network", "--json", str(out), "--timeout", "120"],
                           place=place, master_addr="pfm-master", common_env={"CUDA_VISIBLE_DEVICES": ""},
                           timeout=240)
    report = run_ok(runs, out)
    order = only(report, "LAYOUT006")
    assert order["data"]["dim"] == "tp" and order["data"]["better_mesh"] == "tp2,dp2", order
    assert report["probes"], "the probes ran (a warning does not stop them)"
    assert by_id(report, "BW008") == [], [(f["check_id"], f["message"]) for f in report["findings"]]
