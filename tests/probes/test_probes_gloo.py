"""Real gloo process groups on CPU: every group of every dimension is measured and verified through
`preflight launch`; planted faults (from the test side only) are found and named, in env:// ranks."""

from __future__ import annotations

from pathlib import Path

import pytest

from preflight.lib.mesh_shape import dim_groups, resolve_mesh
from preflight.probes.confirm import CALLS_PER_FIGURE
from tests.helpers.ranks import plant_env, read_json, run_cli, spawn_env_ranks, what_ranks_said

SMALL = ["--sizes", "64KiB,256KiB", "--warmup", "1", "--iters", "3"]


def _launch(tmp_path: Path, n: int, args: list[str], env: dict[str, str] | None = None) -> tuple[int, dict]:
    """`preflight launch -n N ARGS`: its exit code and report."""
    out = tmp_path / "report.json"
    proc = run_cli(["launch", "-n", str(n), *args, "--json", str(out)], env=env, timeout=240)
    assert out.exists(), proc.stdout + proc.stderr
    return proc.returncode, read_json(out)


def _planted(tmp_path: Path, n: int, args: list[str], plant: dict[str, str]) -> tuple[int, dict]:
    """N env:// ranks carrying `plant` (plant_env's): rank 0's exit code and report.

    env:// ranks, not `preflight launch --start-method exec`: what these tests look at is the probes,
    not the launcher, and the test zygote forks a planted rank where launch would exec an interpreter
    (a torch import each for this module's 20 planted ranks: the module 33.5 -> 15.0 CPU-s alone)."""
    out = tmp_path / "report.json"
    runs = spawn_env_ranks(n, [*args, "--json", str(out)], common_env=plant, timeout=240)
    assert out.exists(), what_ranks_said(runs)
    return runs[0].returncode, read_json(out)


def _findings(report: dict, check_id: str) -> list[dict]:
    return [f for f in report["findings"] if f["check_id"] == check_id]


@pytest.mark.parametrize(("n", "mesh", "dims"), [
    (4, "pp2,tp2", {"pp": 2, "tp": 2}),
    (8, "dp2,tp4", {"dp": 2, "tp": 4}),
    (4, "pp2", {"pp": 2, "dp": 2}),  # the remainder becomes dp, right after pp
])
def test_every_group_of_every_dimension_is_measured_and_verified(tmp_path: Path, n: int, mesh: str,
                                                                  dims: dict[str, int]) -> None:
    # --backend auto with no GPU visible (launch alone asks for gloo): auto's vote, on any host.
    code, report = _launch(tmp_path, n, ["--mesh", mesh, *SMALL, "--backend", "auto"], {"CUDA_VISIBLE_DEVICES": ""})
    assert code in (0, 1), report["why"]
    assert not [f for f in report["findings"] if f["severity"] in ("error", "could-not-run")]
    probes = report["probes"]
    assert probes and all(p["verified"] for p in probes)
    expected_groups = dim_groups(resolve_mesh(mesh, n))
    assert set(expected_groups) == set(dims)
    assert report["meta"]["mesh"] == ",".join(f"{d}{s}" for d, s in dims.items())  # resolved, derived dp included
    for dim, groups in expected_groups.items():
        for op in ("all_reduce", "all_to_all"):
            for size in (65536, 262144):
                measured = sorted(p["ranks"] for p in probes if (p["dim"], p["op"]) == (dim, op)
                                  and abs(p["size_bytes"] - size) < 64)
                assert measured == sorted(groups), (dim, op, size)
    world = [p for p in probes if p["dim"] == "world"]
    assert {p["op"] for p in world} == {"all_reduce"} and all(p["ranks"] == list(range(n)) for p in world)
    assert all(p["busbw_gbps"] > 0 and len(p["rank_times_s"]) == len(p["ranks"]) for p in probes)
    assert {(s["dim"], s["op"]) for s in report["probe_summary"]} >= {(d, "all_reduce") for d in dims}
    # The report says the backend really used and why, never "auto", and every rank's own.
    assert report["meta"]["backend"] == "gloo"
    assert report["meta"]["backend_reason"].startswith(f"auto: {n} of {n} rank(s) cannot use a GPU, e.g. rank ")
    devices = report["probe_devices"]
    assert [(d["rank"], d["backend"], d["index"]) for d in devices] == [(r, "gloo", None) for r in range(n)]


SLEEP_50MS_IN_EVERY_COLLECTIVE = """
    import time, torch.distributed as dist
    def slow(real):
        def wrapper(*args, **kwargs):
            time.sleep(0.05)
            return real(*args, **kwargs)
        return wrapper
    dist.all_reduce = slow(dist.all_reduce)
    dist.all_to_all_single = slow(dist.all_to_all_single)
"""


def test_sleeping_rank_flags_its_groups_and_is_named(tmp_path: Path) -> None:
    plant = plant_env(tmp_path, {3: SLEEP_50MS_IN_EVERY_COLLECTIVE})
    # 5 iterations: with 3, a complete separation from one sibling happens by chance 1 time in 20,
    # above the 1% the straggler rule allows (judge.MAX_FALSE_ALARM), so nothing could be named.
    code, report = _planted(tmp_path, 4, ["--mesh", "pp2,tp2", *SMALL, "--iters", "5", "--straggler-ratio", "0.5"],
                            plant)
    stragglers = _findings(report, "BW003")
    assert {(f["data"]["dim"], tuple(f["ranks"])) for f in stragglers} >= {("tp", (2, 3)), ("pp", (1, 3))}
    assert all(3 in f["ranks"] for f in stragglers)
    assert [f["ranks"] for f in _findings(report, "BW004")] == [[3]]
    # Confirmed over more calls than the first pass's 5 (a short window's separation can be luck).
    assert {f["data"]["confirm_calls"] for f in stragglers} == {5 * CALLS_PER_FIGURE}
    assert all(f"measured again over {5 * CALLS_PER_FIGURE} calls" in f["message"] for f in stragglers)
    # A 50 ms sleep in a 64-256 KiB collective is far below half its siblings' speed, confirmed
    # twice: an error (BW003's severity rule), exit 3, the rank named first on the verdict line.
    assert code == 3 and {f["severity"] for f in stragglers} == {"error"}


def test_planted_50ms_straggler_fails_the_run_naming_its_rank_first(tmp_path: Path) -> None:
    """The issue's run: 4 env:// ranks, --mesh dp2,tp2, default ratio, rank 3 sleeps 50 ms per collective."""
    plant = plant_env(tmp_path, {3: SLEEP_50MS_IN_EVERY_COLLECTIVE})
    out = tmp_path / "report.json"
    runs = spawn_env_ranks(4, ["--mesh", "dp2,tp2", *SMALL, "--iters", "5", "--json", str(out)],
                           common_env=plant, timeout=240)
    assert [runs[r].returncode for r in range(4)] == [3] * 4, runs[0].stdout + runs[0].stderr
    report = read_json(out)
    verdict = next(line for line in runs[0].stdout.splitlines() if line.startswith("preflight: FAILED"))
    assert len(verdict) < 160, verdict
    assert verdict.startswith("preflight: FAILED (exit 3): rank 3 on "), verdict
    assert "BW004" in verdict
    suspects = _findings(report, "BW004")
    assert [(f["ranks"], f["severity"]) for f in suspects] == [([3], "error")]
    stragglers = _findings(report, "BW003")
    assert stragglers and all(f["severity"] == "error" and 3 in f["ranks"] for f in stragglers)
    for f in stragglers:  # the rule: both passes below half of the siblings
        data = f["data"]
        assert data["busbw_gbps"] < 0.5 * data["siblings_median_gbps"]
        assert data["confirm_busbw_gbps"] < 0.5 * data["confirm_siblings_median_gbps"]
    # Localization speaks in the same terms: it never says "nobody" while BW004 names rank 3.
    for summary in _findings(report, "BW013"):
        assert "nobody" not in summary["message"]
        if not summary["data"]["named"]:
            assert "follows rank 3 (BW004)" in summary["message"], summary["message"]


def test_corrupting_rank_is_a_correctness_error_naming_it(tmp_path: Path) -> None:
    plant = plant_env(tmp_path, {3: """
        import torch.distributed as dist
        real_all_reduce, real_a2a = dist.all_reduce, dist.all_to_all_single
        def all_reduce(tensor, *args, **kwargs):
            tensor.mul_(-1)
            return real_all_reduce(tensor, *args, **kwargs)
        def all_to_all_single(output, input, *args, **kwargs):
            input.mul_(-1)
            return real_a2a(output, input, *args, **kwargs)
        dist.all_reduce, dist.all_to_all_single = all_reduce, all_to_all_single
    """})
    code, report = _planted(tmp_path, 4, ["--mesh", "pp2,tp2", *SMALL], plant)
    assert report["exit_code"] == 3 and code == 3, report["why"]
    wrong = _findings(report, "BW001")
    assert wrong and all(f["ranks"] == [3] and f["severity"] == "error" for f in wrong)
    expected = {(d, o) for d in ("pp", "tp") for o in ("all_reduce", "all_to_all")} | {("world", "all_reduce")}
    assert {(f["data"]["dim"], f["data"]["op"]) for f in wrong} == expected
    # One finding per group, naming every size it failed at, not one per size.
    assert len(wrong) == len(expected) and all(f["data"]["sizes"] == [65536, 262144] for f in wrong)
    assert all(not p["verified"] for p in report["probes"] if 3 in p["ranks"])
    assert all(p["verified"] for p in report["probes"] if 3 not in p["ranks"])


def test_rank_that_skips_an_op_is_named_by_the_timeout_finding(tmp_path: Path) -> None:
    plant = plant_env(tmp_path, {3: """
        import torch.distributed as dist
        dist.all_to_all_single = lambda *args, **kwargs: None
    """})
    timeout = 4.0
    code, report = _planted(tmp_path, 4, ["--mesh", "pp2,tp2", *SMALL, "--probe-timeout", str(timeout)], plant)
    assert report["exit_code"] == 3 and code == 3, report["why"]
    (hang,) = _findings(report, "BW002")
    assert hang["ranks"] == [3] and hang["data"]["op"] == "all_to_all"
    assert hang["data"]["waiting"] and 3 not in hang["data"]["waiting"]
    assert hang["data"]["reported_after_s"] <= timeout + 2.0
    assert report["meta"]["phases"]["probes"] < 10 * timeout  # ended with a report, not the PG's 30 min


# all_to_all_single raising a TypeError, as a torch whose signature differs would.
RAISES_TYPEERROR = """
    import torch.distributed as dist
    def all_to_all_single(*args, **kwargs):
        raise TypeError("all_to_all_single() got an unexpected keyword argument 'async_op'")
    dist.all_to_all_single = all_to_all_single
"""


def _plant_everywhere(tmp_path: Path, code: str) -> dict[str, str]:
    """A sitecustomize every rank runs (torch 2.4/2.5 as far as the probes can tell)."""
    folder = tmp_path / "plant-all"
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "sitecustomize.py").write_text(code)
    return {"PYTHONPATH": str(folder)}


def test_older_torch_without_the_single_tensor_names_still_runs_every_op(tmp_path: Path) -> None:
    # torch 2.4/2.5 have all_gather_into_tensor / reduce_scatter_tensor only.
    plant = _plant_everywhere(tmp_path, "import torch.distributed as dist\n"
                              "del dist.all_gather_single, dist.reduce_scatter_single\n")
    ops = "all_reduce,all_gather,reduce_scatter,all_to_all,broadcast"
    code, report = _planted(tmp_path, 2, ["--ops", ops, *SMALL], plant)
    assert code in (0, 1), report["why"]
    assert {p["op"] for p in report["probes"]} == set(ops.split(","))
    assert all(p["verified"] for p in report["probes"])
    assert not [f for f in report["findings"] if f["check_id"].startswith("BW")]


def test_an_op_that_raises_typeerror_is_reported_naming_the_op_not_a_crashed_rank(tmp_path: Path) -> None:
    plant = plant_env(tmp_path, {1: RAISES_TYPEERROR})
    code, report = _planted(tmp_path, 2, ["--ops", "all_reduce,all_to_all", *SMALL, "--probe-timeout", "4"], plant)
    found = [f for f in report["findings"] if f["check_id"] in ("BW002", "BW009")]
    assert len(found) == 1 and found[0]["ranks"] == [1], report["findings"]
    assert "all_to_all" in found[0]["message"] and "TypeError" in found[0]["message"]
    assert code == report["exit_code"] != 0
    assert [p["op"] for p in report["probes"]] and {p["op"] for p in report["probes"]} == {"all_reduce"}


def test_an_op_that_raises_typeerror_is_could_not_run(tmp_path: Path) -> None:
    plant = plant_env(tmp_path, {1: RAISES_TYPEERROR})
    code, report = _planted(tmp_path, 2, ["--ops", "all_to_all", *SMALL, "--probe-timeout", "4"], plant)
    assert [f["severity"] for f in report["findings"] if f["check_id"] in ("BW002", "BW009")] == ["could-not-run"]
    assert code == 4


def test_a_rank_stuck_creating_its_groups_communicators_is_named_at_the_connect_step(tmp_path: Path) -> None:
    # Rank 1's first collective on the group holds its thread well past the deadline and rank 0's
    # grace for the others' reports (collect.EARLY_GRACE_S), as ncclCommInitRank does when a peer
    # never joins: rank 1 cannot say where it is, and the connect step, under its own deadline,
    # names it as stuck creating its communicators, not the first measured op.
    plant = plant_env(tmp_path, {1: """
        import time, torch.distributed as dist
        real, calls = dist.all_reduce, []
        def all_reduce(*args, **kwargs):
            calls.append(1)
            if len(calls) == 1:
                time.sleep(9)
            return real(*args, **kwargs)
        dist.all_reduce = all_reduce
    """})
    code, report = _planted(tmp_path, 2, ["--ops", "all_reduce", "--sizes", "64KiB", "--warmup", "1", "--iters", "2",
                                          "--probe-timeout", "3"], plant)
    assert code == report["exit_code"] == 3, report["why"]
    (hang,) = _findings(report, "BW002")
    assert hang["data"]["op"] == "connect" and hang["data"]["dim"] == "world", hang
    assert hang["ranks"] == [1] and "creating its communicators" in hang["data"]["culprits"]["1"], hang
    assert not report["probes"]  # nothing was measured on a group that never connected
