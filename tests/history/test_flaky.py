"""A host planted to fail in 3 of 5 real runs is named flaky (HIS003) in the next run, which
passes on it, and `preflight history exclude --flaky` lists it and no other host.

Real runs: three ranks on three fake hosts (real UTS and mount namespaces, tests/helpers/hosts.py)
over a real c10d store, recorded into a real SQLite history by rank 0. The failure is planted
at NVML, the one boundary that cannot exist here (a FAKE, replayed from tests/fixtures/nvml/
through PREFLIGHT_NVML_REPLAY): in runs 1, 3 and 5 fl-b's GPU has fallen off the bus (GPU003,
an error that puts fl-b on the exclude list); fl-c fails once (run 2), below the 3-of-10 rule.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.checks.test_config_multirank import by_id, run_ok
from tests.helpers.hosts import FakeHost, fake_host
from tests.helpers.ranks import Placement, run_cli, spawn_env_ranks

NVML = Path(__file__).parents[1] / "fixtures" / "nvml"
HOSTS = ("fl-a", "fl-b", "fl-c")
FAILS = {"fl-b": (0, 2, 4), "fl-c": (1,)}  # host -> the runs (0-based) it fails in


@pytest.fixture
def hosts(tmp_path: Path) -> Iterator[dict[str, FakeHost]]:
    """The three hosts, made once: every run is on the same machines, as a cluster's are (and each
    host's zygote, tests/helpers/zygote.py, forks all of its runs' ranks)."""
    made = {host: fake_host(tmp_path / "hosts", host, hosts={"fl-master": "127.0.0.1"}) for host in HOSTS}
    yield made
    for host in made.values():
        host.kill_started()


def _run(tmp: Path, attempt: int, url: str, hosts: dict[str, FakeHost]) -> dict:
    place = {}
    for rank, host in enumerate(HOSTS):
        broken = attempt in FAILS.get(host, ())
        place[rank] = Placement(hosts[host], {
            "LOCAL_RANK": "0", "LOCAL_WORLD_SIZE": "1", "CUDA_VISIBLE_DEVICES": "7" if broken else "0",
            "PREFLIGHT_NVML_REPLAY": str(NVML / ("gpu_lost.json" if broken else "healthy_h100x8.json"))})
    out = tmp / f"run{attempt}.json"
    runs = spawn_env_ranks(3, ["--json", str(out), "--skip", "probe", "--skip", "network", "--timeout", "90",
                               "--run-id", f"flaky-{attempt}", "--history", url],
                           place=place, master_addr="fl-master", timeout=240)
    return run_ok(runs, out)


@pytest.mark.timeout(900)
def test_host_failing_3_of_5_runs_is_named_flaky_and_excluded_alone(
        tmp_path: Path, hosts: dict[str, FakeHost]) -> None:
    url = f"sqlite:///{tmp_path / 'history.db'}"
    for attempt in range(5):
        report = _run(tmp_path, attempt, url, hosts)
        expected_bad = sorted(h for h, runs in FAILS.items() if attempt in runs)
        assert report["bad_hosts"] == expected_bad, [(f["check_id"], f["message"]) for f in report["findings"]]
        assert not by_id(report, "HIS001"), by_id(report, "HIS001")
    report = _run(tmp_path, 5, url, hosts)
    assert report["bad_hosts"] == []  # this run passed on every host ...
    [flaky] = by_id(report, "HIS003")  # ... and fl-b is named all the same, fl-c not
    assert flaky["hosts"] == ["fl-b"] and flaky["severity"] == "warn"
    assert flaky["data"]["failed"] == 3 and flaky["data"]["runs"] == 5
    assert flaky["data"]["run_ids"] == ["flaky-4", "flaky-2", "flaky-0"]
    assert "fl-b failed 3 of its last 5 recorded runs" in flaky["message"]

    exclude = tmp_path / "exclude.txt"
    listed = run_cli(["history", "exclude", "--flaky", "--history", url, "--exclude-file", str(exclude)])
    assert listed.returncode == 0, listed.stderr
    assert exclude.read_text() == "fl-b\n"
    assert [line.split()[0] for line in listed.stdout.splitlines()] == ["fl-b"]
    # --drain: the scontrol command that drains fl-b with HIS003's reason, printed only (a dry run).
    drained = run_cli(["history", "exclude", "--flaky", "--history", url, "--drain"])
    assert drained.returncode == 0, drained.stderr
    assert [line for line in drained.stdout.splitlines() if line.startswith("scontrol")] == [
        'scontrol update NodeName=fl-b State=DRAIN Reason="preflight HIS003: failed 3 of its last 6 runs '
        '(flaky-4, flaky-2, flaky-0)"']
    assert "dry run" in drained.stderr
    # A stricter rule (1 of the last 10) lists fl-c too; GPUs are recorded by UUID per host.
    stricter = run_cli(["history", "exclude", "--flaky", "1/10", "--history", url])
    assert [line.split()[0] for line in stricter.stdout.splitlines()] == ["fl-b", "fl-c"]
    shown = run_cli(["history", "--history", url, "--host", "fl-b", "--json"])
    runs = json.loads(shown.stdout)["runs"]
    assert [r["run_id"] for r in runs] == [f"flaky-{i}" for i in range(5, -1, -1)]
    assert [next(h["failed"] for h in r["hosts"] if h["host"] == "fl-b") for r in runs] == [
        False, True, False, True, False, True]
    # The healthy run recorded fl-b's 8 GPUs by UUID (a lost GPU has none to record).
    assert len(runs[0]["gpus"]) == 8 and all(g["uuid"].startswith("GPU-") and g["host"] == "fl-b"
                                             for g in runs[0]["gpus"])
