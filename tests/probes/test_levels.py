"""`--level quick|standard|long` (issue 45, item 6): each level's plan, budget and what an explicit option keeps."""

from __future__ import annotations

from pathlib import Path

import pytest

from preflight.lib.errors import BadInput
from preflight.options import RunOptions
from preflight.probes.device.run import _budget
from preflight.probes.levels import LEVELS, level_help
from preflight.probes.plan import build_plan
from tests.helpers.ranks import read_json, run_cli

MIB = 1 << 20


def _plan(device: str, **given: str):
    return build_plan(RunOptions.build(**given).for_world(8), device)


def test_quick_measures_less_than_standard_and_long_more() -> None:
    quick, standard = _plan("cuda", level="quick"), _plan("cuda")
    assert (quick.ops, quick.sizes, quick.iters) == (["all_reduce"], [MIB, 64 * MIB], 10)
    assert (standard.ops, standard.sizes, standard.iters) == (["all_reduce", "all_to_all"],
                                                              [MIB, 64 * MIB, 256 * MIB], 20)
    steps = {name: len(_plan("cuda", level=name).measured_steps()) * _plan("cuda", level=name).iters
             for name in ("quick", "standard")}
    assert steps["quick"] * 4 < steps["standard"]
    assert [LEVELS[n].budget_s for n in ("quick", "standard", "long")] == [60, 180, 900]
    assert "quick (60 s on a healthy 8-GPU node)" in level_help()


def test_long_adds_sustained_load_and_storage_and_needs_a_path(tmp_path: Path) -> None:
    with pytest.raises(BadInput, match=r"--level long runs the storage family: .*--storage PATH"):
        RunOptions.build(level="long")
    options = RunOptions.build(level="long", storage=str(tmp_path))
    assert options.device.sustain_s == 120.0 and options.storage is not None
    plan = build_plan(options.for_world(8), "cuda")
    assert len(plan.ops) == 5 and plan.sizes[-1] == 1024 * MIB and plan.iters == 50
    assert _budget(options, "cuda") == 10.0


def test_an_explicit_option_wins_over_its_level() -> None:
    plan = _plan("cuda", level="quick", ops="all_gather", sizes="4M", iters=7)
    assert (plan.ops, plan.sizes, plan.iters) == (["all_gather"], [4 * MIB], 7)
    assert _budget(RunOptions.build(level="quick", device_budget_s=2.5), "cuda") == 2.5
    assert _budget(RunOptions.build(level="quick"), "cuda") == 1.0


def test_a_quick_run_probes_the_quick_plan(tmp_path: Path) -> None:
    out = tmp_path / "r.json"
    done = run_cli(["launch", "-n", "2", "--level", "quick", "--json", str(out)], timeout=240)
    assert done.returncode == 0, done.stdout + done.stderr
    probes = read_json(out)["probes"]
    assert {(p["op"], p["size_bytes"]) for p in probes} == {("all_reduce", MIB)}
    assert "--level quick" in read_json(out)["meta"]["command_line"]


def test_explain_level_quotes_the_levels_table() -> None:
    from preflight import glossary

    assert level_help() in (glossary.lookup("level") or "")
