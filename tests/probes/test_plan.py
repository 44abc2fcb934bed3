"""--sizes, --ops, --expect parsing and the resulting plan."""

from __future__ import annotations

import pytest

from preflight.lib.errors import BadInput
from preflight.lib.mesh_shape import MeshDim, mesh_text
from preflight.options import RunOptions, parse_expect, parse_ops, parse_sizes
from preflight.probes.plan import CONNECT, build_plan


def test_sizes_are_binary_as_in_nccl_tests() -> None:
    """K/M/G are binary as nccl-tests' `-b 1M`; KiB/MiB/GiB the same, explicitly; KB/MB/GB are SI."""
    assert parse_sizes("1M") == [1_048_576]
    assert parse_sizes("3M,64MiB,2K,1KiB,1G,1GiB,512") == sorted(
        [3 * 2**20, 64 * 2**20, 2048, 1024, 2**30, 512])
    assert parse_sizes("1MB,2KB,1GB") == [2000, 10**6, 10**9]


@pytest.mark.parametrize("bad", ["1X", "-1M", "M", "0", "1,,2"])
def test_bad_sizes(bad: str) -> None:
    with pytest.raises(BadInput):
        parse_sizes(bad)


def test_ops() -> None:
    assert parse_ops("all_reduce,all-to-all,send_recv") == ["all_reduce", "all_to_all", "send_recv"]
    with pytest.raises(BadInput, match="unknown op 'allreduce'"):
        parse_ops("allreduce")


def test_expect_units() -> None:
    assert parse_expect("tp=300GB/s,dp=400Gb/s,cp=2000MB/s,pp=7") == {"tp": 300.0, "dp": 50.0, "cp": 2.0, "pp": 7.0}
    # A bare G/M/K is binary, as in --sizes: 1G/s is 1 GiB/s = 1.073741824 GB/s.
    assert parse_expect("tp=1G/s,dp=1GiB/s,cp=1024M/s") == {"tp": 2**30 / 1e9, "dp": 2**30 / 1e9, "cp": 2**30 / 1e9}
    for bad in ("tp300GB/s", "tp=fast", "=3GB/s", "tp=3furlongs/s"):
        with pytest.raises(BadInput):
            parse_expect(bad)


def test_expect_must_name_a_dimension() -> None:
    with pytest.raises(BadInput, match="no mesh dimension 'ep'"):
        RunOptions.build(mesh="pp2,tp4", expect="ep=10GB/s").for_world(8)
    RunOptions.build(mesh="pp2,tp4", expect="dp=10GB/s").for_world(16)  # the remainder dim


def test_default_plan_probes_every_dimension_and_the_world() -> None:
    plan = build_plan(RunOptions.build(mesh="pp2,tp2").for_world(4), "cpu")
    dims = {d for d, _, _ in plan.measured_steps()}
    ops = {o for _, o, _ in plan.measured_steps()}
    assert dims == {"pp", "tp", "world"} and ops == {"all_reduce", "all_to_all"}
    assert [(d, o) for d, o, _ in plan.measured_steps() if d == "world"] == [("world", "all_reduce")] * len(plan.sizes)


def test_every_dimensions_communicators_are_created_first_under_their_own_step() -> None:
    plan = build_plan(RunOptions.build(mesh="pp2,tp2").for_world(4), "cpu")
    steps = plan.steps()
    assert steps[:3] == [("pp", CONNECT, 0), ("tp", CONNECT, 0), ("world", CONNECT, 0)]
    assert steps[3:] == plan.measured_steps() and CONNECT not in {o for _, o, _ in steps[3:]}


def test_send_recv_only_between_pipeline_stages() -> None:
    plan = build_plan(RunOptions.build(mesh="pp2,tp2", ops="send_recv,all_gather", sizes="1K").for_world(4), "cpu")
    assert [(d, o) for d, o, _ in plan.measured_steps()] == [("pp", "send_recv"), ("pp", "all_gather"),
                                                             ("tp", "all_gather")]


def test_options_are_typed_and_the_mesh_resolved_once_the_world_is_known() -> None:
    options = RunOptions.build(mesh="pp2,tp4", sizes="1M,4KiB", ops="all-gather", expect="dp=400Gb/s",
                               silence=["bw003"])
    assert options.probes.mesh == [MeshDim("pp", 2), MeshDim("tp", 4)] and options.probes.world_size is None
    assert (options.probes.sizes, options.probes.ops, options.probes.expect, options.silence) == (
        [4096, 2**20], ["all_gather"], {"dp": 50.0}, ["BW003"])
    resolved = options.for_world(16)
    assert mesh_text(resolved.probes.mesh) == "pp2,dp2,tp4" and resolved.probes.world_size == 16
    assert resolved.for_world(16).probes.mesh == resolved.probes.mesh  # a resolved mesh resolves to itself
    with pytest.raises(ValueError, match="for_world"):
        build_plan(options, "cpu")


def test_a_plan_that_measures_nothing_says_why() -> None:
    """RUN012's reasons: asked for and not measured is never a pass (issue 45)."""
    no_pp = build_plan(RunOptions.build(mesh="tp2", ops="send_recv", sizes="1K").for_world(4), "cpu")
    assert no_pp.measured_steps() == []
    assert no_pp.nothing_to_measure(4) == ["send_recv needs a pipeline dimension (--mesh pp2,... names one)"]
    # One op of two measured: the other is still named.
    mixed = build_plan(RunOptions.build(mesh="tp2", ops="send_recv,all_reduce", sizes="1K").for_world(4), "cpu")
    assert [r.split(" ")[0] for r in mixed.nothing_to_measure(4)] == ["send_recv"]
    lone = build_plan(RunOptions.build(sizes="1K").for_world(1), "cpu")
    assert lone.nothing_to_measure(1)[0].startswith("one rank: no collective to measure")
    whole = build_plan(RunOptions.build(mesh="pp2,tp2", ops="send_recv,all_gather", sizes="1K").for_world(4), "cpu")
    assert whole.nothing_to_measure(4) == []
