"""The storage family over network-namespace hosts (tests/helpers/netns.py), one rank per host.

The checkpoint path is a real shared directory: the same directory bind-mounted over PATH on
every host. Faults, all outside the package: a host whose PATH is its own private directory
(its bind mount, in its own mount namespace) and a host whose disk is slow (the shared
directory on a loop-device ext4, that host's processes in a cgroup v1 blkio throttle on the loop
device: tests/helpers/slow_disk.py). Each is named alone, and a healthy run names nobody.

`PREFLIGHT_STORAGE_RUNS=10` repeats each run (the "10 of 10" of issue 33; default 1 on this
shared 2-core machine; what was run is in docs/performance.md).
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tests.helpers.netns import FakeNetwork
from tests.helpers.ranks import read_json, spawn_env_ranks, spread
from tests.helpers.slow_disk import blkio_throttle, loop_filesystem

pytestmark = pytest.mark.netns

RUNS = int(os.environ.get("PREFLIGHT_STORAGE_RUNS", "1"))
ARGS = ["--skip", "probe,gpu,nic", "--timeout", "90"]


def _shared(hosts: FakeNetwork, source: Path, path: Path, private: dict[int, Path] | None = None) -> None:
    """Bind `source` over `path` on every host (a private directory instead on the hosts in `private`)."""
    for index, host in enumerate(hosts):
        host.binds = {(private or {}).get(index, source): path}


def _run(hosts: FakeNetwork, out: Path, path: Path, *extra: str) -> dict:
    runs = spawn_env_ranks(len(hosts), [*ARGS, "--storage", str(path), *extra, "--json", str(out)],
                           place=spread(hosts, 1), master_addr=hosts[0].address,
                           common_env={"GLOO_SOCKET_IFNAME": "ib0"}, timeout=300)
    assert out.exists(), "\n".join(run.stdout + run.stderr for run in runs.values())
    return read_json(out)


def _storage(report: dict) -> list[dict]:
    return [f for f in report["findings"] if f["check_id"].startswith("STO")]


@pytest.mark.timeout(600 * RUNS)  # does-not-hang bound: RUNS x two runs of three ranks on 2 shared cores
def test_a_host_with_a_private_path_is_named_alone_and_a_healthy_run_names_nobody(netns_hosts, tmp_path: Path
                                                                                 ) -> None:
    hosts = netns_hosts(3, prefix=f"pfs{os.getpid() % 1000}")
    shared, path = tmp_path / "shared", tmp_path / "ckpt"
    shared.mkdir()
    path.mkdir()
    for attempt in range(RUNS):
        private = tmp_path / f"private{attempt}"
        private.mkdir()
        _shared(hosts, shared, path)
        healthy = _run(hosts, tmp_path / f"healthy{attempt}.json", path, "--storage-budget", "4M")
        assert _storage(healthy) == [] and healthy["exit_code"] == 0, healthy["findings"]
        assert [h["host"] for h in healthy["storage"]["hosts"]] == [h.hostname for h in hosts]
        assert all(h["sees"] and h["write_gbps"] and h["read_gbps"] for h in healthy["storage"]["hosts"])
        # the restart's own pattern, past this host's caches: every read was of a file another host wrote, with
        # O_DIRECT on this ext4 (the report says which), and the checksums agreed
        # A host that read slow under load is measured again alone (the suffix says so), and names nobody.
        assert healthy["storage"]["read_back"] in ("O_DIRECT; each rank read a file another host wrote",
                                                   "O_DIRECT; each rank read a file another host wrote; "
                                                   "a host measured again alone read its own files")

        _shared(hosts, shared, path, private={1: private})
        report = _run(hosts, tmp_path / f"private{attempt}.json", path, "--storage-budget", "4M")
        [finding] = _storage(report)
        assert finding["check_id"] == "STO001" and finding["hosts"] == [hosts[1].hostname], finding
        assert f"[{private}]" in finding["message"] and f"[{shared}]" in finding["message"]
        assert report["exit_code"] == 3 and report["bad_hosts"] == [hosts[1].hostname]
        assert list(shared.iterdir()) == [] and list(private.iterdir()) == []


@pytest.mark.timeout(600 * RUNS)
def test_a_host_on_a_throttled_disk_is_named_alone_for_write_and_read(netns_hosts, tmp_path: Path) -> None:
    """blkio throttle of 2 MiB/s on the loop device for host 3's processes; the others run at the disk's speed."""
    hosts = netns_hosts(3, prefix=f"pft{os.getpid() % 1000}")
    path = tmp_path / "ckpt"
    path.mkdir()
    with loop_filesystem(tmp_path, "96m") as disk, blkio_throttle(disk.device, 2 * 2**20) as group:
        _shared(hosts, disk.mount, path)
        hosts[2].cgroup = group
        for attempt in range(RUNS):
            report = _run(hosts, tmp_path / f"slow{attempt}.json", path, "--storage-budget", "4M")
            slow = _storage(report)
            assert {(f["check_id"], tuple(f["hosts"]), f["data"]["figure"]) for f in slow} == {
                ("STO007", (hosts[2].hostname,), "write"), ("STO007", (hosts[2].hostname,), "read")}, report["storage"]
            rows = {h["host"]: h for h in report["storage"]["hosts"]}
            assert rows[hosts[2].hostname]["write_again_gbps"] is not None  # measured a second time
            assert list(disk.mount.iterdir()) == [d for d in disk.mount.iterdir() if d.name == "lost+found"]
        hosts.close()  # every process out of the throttled group before it is removed
