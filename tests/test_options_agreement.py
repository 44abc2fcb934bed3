"""The gang agrees before it measures (options/agreement.py, RUN011): ranks started with different values
of an option every rank must agree on, or from another preflight, are named with their values and ranks,
and every rank exits 3 within seconds, none entering the probes.

Before: 4 env:// ranks with `--mesh dp2,tp2`, rank 2 with `--sizes 128K`: gloo aborted rank 0
("Received data size doesn't match expected size", no report) and the others exited 4.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from preflight.lib.hostlist import rank_ranges
from preflight.model.agreement import WIRE_VERSION
from preflight.options import AGREEING, RunOptions
from preflight.options.agreement import agreed_values, disagreements
from tests.helpers.ranks import Placement, free_port, plant_env, read_json, start_rank, wait_for_ranks

WORLD = 4
TIMEOUT = "120"  # every wait for a deadline would take this long: the bound below is under it
BOUND_S = 90.0  # generous on a loaded 2-core box (a launch takes ~10 s), and under any deadline
COMMON = ["--quiet"]

# Each agreeing row (the table's column): the value every other rank is started with (None: the flag
# not given) and the different one. `{tmp}` is the test's folder. A row marked agree without an entry
# here fails test_every_agreeing_option_is_tried.
DIFFERENT: dict[str, tuple[str | None, str]] = {
    "--timeout": (TIMEOUT, "121"),
    "--check-timeout": ("10", "11"),
    "--out-dir": (None, "{tmp}/out"),
    "--only": (None, "world,run,env,software,probe"),
    "--skip": ("history", "history,nic"),
    "--fingerprint": (None, "numpy"),
    "--mesh": ("dp2,tp2", "tp4"),
    "--backend": ("gloo", "auto"),
    "--ops": ("all_reduce", "all_reduce,all_to_all"),
    "--sizes": ("64K", "128K"),
    "--warmup": ("1", "2"),
    "--iters": ("2", "3"),
    "--probe-timeout": ("30", "31"),
    "--expect": (None, "world=1MB/s"),
    "--device-budget": (None, "0.05"),
    "--device-sustain": (None, "0.01"),
    "--storage": ("{tmp}/a", "{tmp}/b"),
    "--checkpoint-size": (None, "1G"),
    "--storage-budget": (None, "1M"),
    "--level": (None, "quick"),
}
ODD_RANK = {flag: (1, 2, 3, 0)[i % WORLD] for i, flag in enumerate(DIFFERENT)}  # rank 0 is outvoted too
# Rank 3 runs another preflight: its version and its payload layout are named the same way.
OTHER_PREFLIGHT = """
import preflight, preflight.model.agreement as agreement
preflight.__version__ = "0.0.9"
agreement.WIRE_VERSION += 1
"""


def _argv(rank: int, tmp: Path, differing: tuple[str, ...] = tuple(DIFFERENT)) -> list[str]:
    """Rank `rank`'s command line: each flag of `differing` with its different value on its odd rank."""
    argv = ["run", *COMMON, "--json", str(tmp / f"r{rank}.json")]
    for flag, (common, odd) in DIFFERENT.items():
        value = odd if ODD_RANK[flag] == rank and flag in differing else common
        if value is not None:
            argv += [flag, value.format(tmp=tmp)]
    return argv


def test_every_agreeing_option_is_tried() -> None:
    assert set(DIFFERENT) == {option.flag for option in AGREEING}


def test_ranks_started_otherwise_are_named_and_all_exit_3_without_probing(tmp_path: Path) -> None:
    for folder in ("a", "b", "out"):
        (tmp_path / folder).mkdir()
    port = free_port()
    planted = plant_env(tmp_path, {3: OTHER_PREFLIGHT})
    started = time.monotonic()
    procs = {rank: start_rank(rank, WORLD, _argv(rank, tmp_path), port=port,
                              placement=Placement(env=planted if rank == 3 else {}))
             for rank in range(WORLD)}
    runs = wait_for_ranks(procs, started, timeout=300)
    for rank, run in runs.items():
        assert run.returncode == 3, (rank, run.stdout[-2000:], run.stderr[-2000:])
        assert run.elapsed_s < BOUND_S, (rank, run.elapsed_s)
        assert "Traceback" not in run.stderr and "gloo" not in run.stderr, (rank, run.stderr[-2000:])
    report = read_json(tmp_path / "r0.json")
    named = {f["message"].partition(":")[0]: f for f in report["findings"] if f["check_id"] == "RUN011"}
    for flag, rank in ODD_RANK.items():
        assert flag in named, (flag, sorted(named))
        assert named[flag]["ranks"] == [rank], (flag, named[flag])
        others = rank_ranges(r for r in range(WORLD) if r != rank)
        assert f" on rank {rank}" in named[flag]["message"], named[flag]["message"]
        assert f" on ranks {others}" in named[flag]["message"], named[flag]["message"]
    assert named["--sizes"]["message"] == "--sizes: 64K on ranks 0-1,3; 128K on rank 2"  # the case
    for stamped, value in (("preflight version", "0.0.9"), ("wire version", str(WIRE_VERSION + 1))):
        assert named[stamped]["ranks"] == [3] and f"{value} on rank 3" in named[stamped]["message"]
    assert set(named) == {*DIFFERENT, "preflight version", "wire version"}
    # No rank entered the probes: no result, and rank 0 says why.
    assert report["probes"] == []
    assert any(f["check_id"] == "RUN003" and "RUN011" in f["message"] for f in report["findings"])


@pytest.mark.parametrize("flag", list(DIFFERENT))
def test_one_different_value_is_one_disagreement_naming_its_ranks(flag: str, tmp_path: Path) -> None:
    """The comparison itself, per row: the parsed values by rank (no processes)."""
    for folder in ("a", "b", "out"):
        (tmp_path / folder).mkdir()
    from preflight.channel.wire import this_stamp
    from preflight.commands.cli import build_parser, options_from_args

    views = {}
    for rank in range(WORLD):
        argv = _argv(rank, tmp_path, differing=(flag,))
        options = options_from_args(build_parser().parse_args(argv), argv).for_world(WORLD)
        views[rank] = (this_stamp(), agreed_values(options))
    found = dict(disagreements(views))
    assert list(found) == [flag]
    odd = ODD_RANK[flag]
    assert sorted(found[flag].values()) == sorted([[odd], [r for r in range(WORLD) if r != odd]])


def test_the_same_value_written_two_ways_agrees() -> None:
    """Values are compared parsed: `64K` and `65536`, `all-reduce` and `all_reduce` are one value."""
    from preflight.channel.wire import this_stamp

    one = agreed_values(RunOptions.build(sizes="64K", ops="all-reduce", timeout_s=60).for_world(4))
    two = agreed_values(RunOptions.build(sizes="65536", ops="all_reduce", timeout_s=60.0).for_world(4))
    assert disagreements({0: (this_stamp(), one), 1: (this_stamp(), two)}) == []


TRAINER = """
import json, os, sys
import torch.distributed as dist
from torch.distributed.device_mesh import init_device_mesh
import preflight

dist.init_process_group("gloo")
mesh = init_device_mesh("cpu", (2, 2), mesh_dim_names=("dp", "tp"))
try:
    preflight.check(mesh, sizes=os.environ["SIZES"], quiet=True, timeout_s=120.0)
    print(json.dumps({"raised": False}))
except preflight.PreflightFailed as failed:
    print(json.dumps({"raised": True, "exit_code": failed.report.exit_code, "probes": len(failed.report.probes),
                      "findings": [[f.check_id, f.message, f.ranks] for f in failed.report.findings]}))
"""


def test_preflight_check_called_with_other_keywords_on_one_rank_fails_on_every_rank(tmp_path: Path) -> None:
    """The same inside a job (preflight.check): a rank called with other sizes is named, every rank raises."""
    script = tmp_path / "trainer.py"
    script.write_text(TRAINER)
    port, started = free_port(), time.monotonic()
    procs = {rank: start_rank(rank, WORLD, [], port=port, program=[str(script)],
                              placement=Placement(env={"SIZES": "128K" if rank == 2 else "64K"}))
             for rank in range(WORLD)}
    runs = wait_for_ranks(procs, started, timeout=300)
    for rank, run in runs.items():
        assert run.returncode == 0, (rank, run.stdout[-2000:], run.stderr[-2000:])
        outcome = json.loads(run.stdout.strip().splitlines()[-1])
        assert outcome["raised"] and outcome["exit_code"] == 3 and outcome["probes"] == 0, (rank, outcome)
        named = [f for f in outcome["findings"] if f[0] == "RUN011"]
        assert named == [["RUN011", "--sizes: 64K on ranks 0-1,3; 128K on rank 2", [2]]], (rank, outcome)
