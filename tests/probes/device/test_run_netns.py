"""Device probes over four network-namespace hosts, two ranks each (8 env:// ranks over ib0).

One rank's matrix products are made ~3x slower and another's nudged to a wrong value, both by
a sitecustomize from outside the package (test_device_probes_gloo.py's plants): the slow rank
is named alone by DEV003 and the wrong one alone by DEV001, each with its own fake host, and
the run exits 3. The 10-run figures are in docs/probes.md; one run here keeps the suite short.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.helpers.netns import FakeNetwork
from tests.helpers.ranks import plant_env, read_json, spawn_env_ranks, spread
from tests.probes.device.test_run_gloo import QUICK, SLOW_MATMUL, WRONG_MATMUL, device_findings

pytestmark = pytest.mark.netns


def run_planted_on_hosts(hosts: FakeNetwork, tmp_path: Path, slow: int, wrong: int) -> tuple[dict, set[int]]:
    """8 ranks, 2 per fake host, the plants on `slow` and `wrong`; (report, the ranks' exit codes)."""
    out = tmp_path / "report.json"
    env = {**plant_env(tmp_path, {slow: SLOW_MATMUL, wrong: WRONG_MATMUL}), "GLOO_SOCKET_IFNAME": "ib0"}
    runs = spawn_env_ranks(8, [*QUICK, "--json", str(out)], place=spread(hosts, 2), master_addr=hosts[0].address,
                           common_env=env, timeout=300)
    assert out.exists(), "\n".join(r.stdout + r.stderr for r in runs.values())
    return read_json(out), {r.returncode for r in runs.values()}


# Quiet: on CPU the device figures are the shared cores' and memory's; another worker's ranks on the same
# two cores took a healthy rank's copy to 36-46% of its siblings' (DEV004) and hid a planted 3x-slow
# rank (DEV003 at 51%) in the suite; on a GPU node each figure is the rank's own GPU's.
@pytest.mark.quiet
@pytest.mark.timeout(600)  # one run of 8 ranks on 2 shared cores; a does-not-hang bound
def test_slow_and_wrong_ranks_are_named_alone_with_their_hosts(netns_hosts, tmp_path: Path) -> None:
    hosts: FakeNetwork = netns_hosts(4, prefix="pfdev")
    report, codes = run_planted_on_hosts(hosts, tmp_path, slow=5, wrong=2)
    found = sorted((f["check_id"], f["ranks"], f["severity"], f["hosts"]) for f in device_findings(report))
    host_of = {row["rank"]: row["host"] for row in report["device_probes"]}
    assert host_of[5] == hosts[2].hostname and host_of[2] == hosts[1].hostname  # spread: two ranks per host
    assert found == [("DEV001", [2], "error", [hosts[1].hostname]), ("DEV003", [5], "warn", [hosts[2].hostname])]
    assert report["exit_code"] == 3 and codes == {3}
