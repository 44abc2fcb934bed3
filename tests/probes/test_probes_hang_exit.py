"""A rank stuck for good inside a collective: the others write the report, exit 3 and are gone.

Before, the waiting ranks' gloo process group joined the thread still inside the abandoned
collective at interpreter exit, so preflight hung the job it was meant to protect.
"""

from __future__ import annotations

from pathlib import Path

from tests.helpers.ranks import Placement, plant_env, read_json, spawn_env_ranks

# Rank 3 enters its first all_to_all and never comes back (a hung GPU, a wedged NIC driver).
STUCK_FOR_GOOD = """
import time, torch.distributed as dist
def all_to_all_single(*args, **kwargs):
    time.sleep(3600)
dist.all_to_all_single = all_to_all_single
"""
PROBE_TIMEOUT_S = 6
# "Does not hang" bound: the probes' deadline plus generous headroom for 4 ranks on 2 loaded cores.
EXIT_BOUND_S = 60


def test_ranks_waiting_on_a_rank_stuck_for_good_exit_3_after_the_report(tmp_path: Path) -> None:
    report_path = tmp_path / "r.json"
    runs = spawn_env_ranks(4, ["--ops", "all_to_all", "--sizes", "64KiB", "--iters", "2", "--warmup", "1",
                               "--probe-timeout", str(PROBE_TIMEOUT_S), "--json", str(report_path)],
                           place={3: Placement(env=plant_env(tmp_path, {3: STUCK_FOR_GOOD}))},
                           common_env={"OMP_NUM_THREADS": "1"}, timeout=EXIT_BOUND_S + 15)
    report = read_json(report_path)
    [hang] = [f for f in report["findings"] if f["check_id"] == "BW002"]
    assert hang["ranks"] == [3], hang
    for rank in (0, 1, 2):
        assert runs[rank].returncode == 3, (rank, runs[rank].stdout[-800:], runs[rank].stderr[-800:])
        assert runs[rank].elapsed_s < EXIT_BOUND_S, (rank, runs[rank].elapsed_s)
    assert "killed after timeout" in runs[3].stderr  # the stuck rank itself only ends when the test kills it
