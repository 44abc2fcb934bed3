"""BLD001 for real: two network-namespace hosts, one with a rebuilt wheel under the same version.

Each host's ranks find `pftiny` 1.0 first on their PYTHONPATH, installed by pip from a wheel built
in the test (tests/checks/test_build.py's make_wheel); the second host's wheel has another
`pftiny/__init__.py`. Rank 0 names that host, the distribution and the file.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.checks.test_build import install, make_wheel
from tests.helpers.ranks import read_json, spawn_env_ranks, spread

pytestmark = pytest.mark.netns


def _run(netns_hosts, tmp_path: Path, second: str) -> tuple[list[str], dict]:
    hosts = netns_hosts(2, prefix="pfbl")
    first = install(make_wheel(tmp_path / "w1", "pftiny", "1.0", "X = 1\n"), tmp_path / "t1")
    other = install(make_wheel(tmp_path / "w2", "pftiny", "1.0", second), tmp_path / "t2")
    report = tmp_path / "report.json"
    paths = {0: {"PYTHONPATH": str(first)}, 1: {"PYTHONPATH": str(other)}}
    env = {"GLOO_SOCKET_IFNAME": "ib0", "PREFLIGHT_JOB_ID": tmp_path.name, "PREFLIGHT_SECRET": tmp_path.name}
    runs = spawn_env_ranks(2, ["--json", str(report), "--timeout", "60", "--skip", "probe",
                               "--fingerprint", "pftiny"],
                           place=spread(hosts, 1, paths), master_addr=hosts[0].eth_address, common_env=env,
                           timeout=180)
    assert report.exists(), runs[0].stdout + runs[0].stderr
    return [h.hostname for h in hosts], read_json(report)


def test_the_host_with_another_build_is_named_with_the_file_that_differs(netns_hosts, tmp_path: Path) -> None:
    names, report = _run(netns_hosts, tmp_path, "X = 2\n")
    [finding] = [f for f in report["findings"] if f["check_id"] == "BLD001"]
    # Two hosts, one each: the "most common" build is the first group; whichever is odd is named alone.
    assert len(finding["hosts"]) == 1 and finding["hosts"][0] in names
    assert finding["data"]["distribution"] == "pftiny" and finding["data"]["version"] == "1.0"
    assert finding["data"]["files"] == ["pftiny/__init__.py"] and "pftiny/__init__.py" in finding["message"]


def test_equal_builds_are_silent(netns_hosts, tmp_path: Path) -> None:
    _, report = _run(netns_hosts, tmp_path, "X = 1\n")
    assert [f for f in report["findings"] if f["check_id"].startswith("BLD")] == []
