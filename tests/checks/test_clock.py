"""CLK001/CLK002: a host's wall clock against rank 0's, measured through the store.

The offset is real: one rank runs under Debian's libfaketime (LD_PRELOAD, FAKETIME="+5s"), so
its time.time() is 5 s ahead, from outside the package. The setting that works: a relative
offset with monotonic time faked too (shifted by the same 5 s, so every elapsed time is true).
FAKETIME_DONT_FAKE_MONOTONIC=1 breaks Python's time.sleep (libfaketime 0.9.10's clock_nanosleep
with TIMER_ABSTIME on the real monotonic clock: EINVAL). Three fake hosts (tests/helpers/hosts.py), one rank each,
so every rank is its host's local rank 0 and measures.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.checks.test_config_multirank import by_id, run_ok
from tests.helpers.facts import rank_facts, run
from tests.helpers.hosts import fake_host
from tests.helpers.ranks import Placement, spawn_env_ranks
from tests.helpers.tools import require

FAKETIME = Path("/usr/lib/x86_64-linux-gnu/faketime/libfaketime.so.1")
AHEAD_S = 5.0
RUNS = int(__import__("os").environ.get("PREFLIGHT_CLOCK_RUNS", "1"))  # "10 of 10": PREFLIGHT_CLOCK_RUNS=10


def _run(tmp: Path, skewed: bool, args: tuple[str, ...] = ()) -> dict:
    require(FAKETIME.exists(), "libfaketime is not installed: apt-get install faketime")
    master = {"ck-master": "127.0.0.1"}
    place = {}
    for rank, host in enumerate(("ck-a", "ck-b", "ck-c")):
        env = {"LOCAL_RANK": "0", "LOCAL_WORLD_SIZE": "1"}
        if skewed and rank == 2:
            env.update({"LD_PRELOAD": str(FAKETIME), "FAKETIME": f"+{AHEAD_S:g}s"})
        place[rank] = Placement(fake_host(tmp, host, hosts=master), env)
    out = tmp / "report.json"
    runs = spawn_env_ranks(3, ["--json", str(out), "--skip", "probe", "--skip", "network", "--timeout", "90", *args],
                           place=place, master_addr="ck-master", timeout=240)
    return run_ok(runs, out)


@pytest.mark.parametrize("attempt", range(RUNS))
def test_a_host_5s_ahead_is_named_with_its_offset_within_its_error_bar(tmp_path: Path, attempt: int) -> None:
    report = _run(tmp_path, skewed=True)
    [finding] = by_id(report, "CLK001")
    assert finding["hosts"] == ["ck-c"] and finding["ranks"] == [2]
    offset, error = finding["data"]["offset_s"], finding["data"]["error_s"]
    assert abs(offset - AHEAD_S) <= error + 0.05, finding  # libfaketime's own step is exact; 50 ms for rounding
    assert "ahead of rank 0's" in finding["message"] and finding["data"]["error_s"] < 1.0


@pytest.mark.parametrize("attempt", range(RUNS))
def test_no_finding_without_an_offset(tmp_path: Path, attempt: int) -> None:
    report = _run(tmp_path, skewed=False)
    assert by_id(report, "CLK001") == [] and by_id(report, "CLK002") == []


def test_a_threshold_above_the_offset_is_silent(tmp_path: Path) -> None:
    report = _run(tmp_path, skewed=True, args=("--expect", "clock_skew=8s"))
    assert by_id(report, "CLK001") == []


def _clock(rank: int, host: str, offset: float | None, error: float = 0.01, synced: bool | None = None,
           threshold: float = 1.0) -> object:
    return rank_facts(rank, host, world_size=3, placement={"clock": {
        "offset_s": offset, "error_s": error if offset is not None else None, "samples": 5,
        "threshold_s": threshold, "synchronised": synced}})


def test_clk001_needs_the_offset_beyond_its_error_bar() -> None:
    assert run("CLK001", [_clock(0, "a", 0.0), _clock(1, "b", 1.4, error=0.5), _clock(2, "c", None)]) == []
    [finding] = run("CLK001", [_clock(0, "a", 0.0), _clock(1, "b", -1.6, error=0.5), _clock(2, "c", 0.2)])
    assert finding.hosts == ["b"] and "1.600 s behind rank 0's" in finding.message


def test_clk002_names_unsynchronised_hosts_only_beside_synchronised_ones() -> None:
    assert run("CLK002", [_clock(0, "a", 0.0, synced=False), _clock(1, "b", 0.0, synced=False)]) == []
    [finding] = run("CLK002", [_clock(0, "a", 0.0, synced=True), _clock(1, "b", 0.0, synced=False),
                               _clock(2, "c", 0.0, synced=None)])
    assert finding.hosts == ["b"]


def test_expect_clock_skew_is_parsed_apart_from_the_mesh_and_bad_values_are_one_line() -> None:
    from preflight.lib.errors import BadInput
    from preflight.options import CLOCK_SKEW_S, RunOptions
    from tests.helpers.ranks import run_cli

    assert RunOptions.build(expect="clock_skew=250ms").clock_skew_s == 0.25
    assert RunOptions.build(expect="world=10GB/s,clock_skew=2s").clock_skew_s == 2.0
    assert RunOptions.build().clock_skew_s == CLOCK_SKEW_S
    with pytest.raises(BadInput, match="clock_skew"):
        RunOptions.build(expect="clock_skew=soon")
    bad = run_cli(["run", "--expect", "clock_skew=-1s"])
    assert bad.returncode == 2 and "clock_skew" in bad.stderr and "Traceback" not in bad.stderr
