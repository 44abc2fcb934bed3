"""A rank stuck for good inside a collective: the others write the report, exit 3 and are gone.

Before, the waiting ranks' gloo process group joined the thread still inside the abandoned
collective at interpreter exit, so preflight hung the job it was meant to protect.
"""

from __future__ import annotations

import time
from pathlib import Path

from tests.helpers.ranks import Placement, free_port, plant_env, read_json, start_rank, wait_for_ranks

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
    args = ["run", "--ops", "all_to_all", "--sizes", "64KiB", "--iters", "2", "--warmup", "1",
            "--probe-timeout", str(PROBE_TIMEOUT_S), "--json", str(report_path)]
    port, started = free_port(), time.monotonic()
    stuck = Placement(env=plant_env(tmp_path, {3: STUCK_FOR_GOOD}))
    procs = {rank: start_rank(rank, 4, args, placement=stuck if rank == 3 else Placement(),
                              common_env={"OMP_NUM_THREADS": "1"}, port=port) for rank in range(4)}
    try:
        runs = wait_for_ranks({rank: procs[rank] for rank in (0, 1, 2)}, started, EXIT_BOUND_S)
        # The stuck rank itself never ends on its own: it is still inside the collective.
        assert procs[3].poll() is None
    finally:
        procs[3].kill()
        procs[3].communicate()
    report = read_json(report_path)
    [hang] = [f for f in report["findings"] if f["check_id"] == "BW002"]
    assert hang["ranks"] == [3], hang
    for rank in (0, 1, 2):
        assert runs[rank].returncode == 3, (rank, runs[rank].stdout[-800:], runs[rank].stderr[-800:])
        assert "killed after timeout" not in runs[rank].stderr, (rank, runs[rank].elapsed_s)
    # Rank 3 beats on (its beat thread lives) but will never read the verdict: rank 0 did not keep
    # the job waiting for it (the hand-off's 30 s cap), and says so.
    assert "rank 3 did not read the verdict (hung: sent no probe results" in runs[0].stderr, runs[0].stderr[-1500:]


# Rank 3 is slow in every all_reduce (its tp group becomes a straggler, confirmed by the second
# pass), then never enters the point-to-point localization: its partners give up on a recv that
# stays posted, which a clean teardown of their groups would wait on for good.
SLOW_THEN_GONE_IN_LOCALIZATION = """
import time, torch.distributed as dist
real_all_reduce = dist.all_reduce
def all_reduce(*args, **kwargs):
    time.sleep(0.05)
    return real_all_reduce(*args, **kwargs)
def stuck(*args, **kwargs):
    time.sleep(3600)
dist.all_reduce, dist.isend, dist.irecv = all_reduce, stuck, stuck
"""


def test_ranks_whose_localization_partner_is_stuck_for_good_still_exit(tmp_path: Path) -> None:
    report_path = tmp_path / "r.json"
    args = ["run", "--mesh", "dp2,tp2", "--ops", "all_reduce", "--sizes", "64KiB", "--iters", "5", "--warmup", "1",
            "--straggler-ratio", "0.5", "--probe-timeout", str(PROBE_TIMEOUT_S), "--json", str(report_path)]
    port, started = free_port(), time.monotonic()
    stuck = Placement(env=plant_env(tmp_path, {3: SLOW_THEN_GONE_IN_LOCALIZATION}))
    procs = {rank: start_rank(rank, 4, args, placement=stuck if rank == 3 else Placement(),
                              common_env={"OMP_NUM_THREADS": "1"}, port=port) for rank in range(4)}
    try:
        runs = wait_for_ranks({rank: procs[rank] for rank in (0, 1, 2)}, started, 2 * EXIT_BOUND_S)
    finally:
        procs[3].kill()
        procs[3].communicate()
    report = read_json(report_path)
    assert any(3 in f["ranks"] for f in report["findings"] if f["check_id"].startswith("BW")), report["findings"]
    [summary] = [f for f in report["findings"] if f["check_id"] == "BW013"]  # the localization says it was cut short
    assert "cut short" in summary["message"] and summary["data"]["unfinished"], summary
    # The round robin's first round pairs rank 0 with rank 3: the summary names the rank it was stuck with.
    assert "exchange with rank 3 did not complete" in summary["data"]["unfinished"], summary
    for rank in (0, 1, 2):
        assert "killed after timeout" not in runs[rank].stderr, (rank, runs[rank].elapsed_s, runs[rank].stderr[-1500:])
        assert runs[rank].returncode == report["exit_code"], (rank, runs[rank].stderr[-800:])
    # Rank 3 beats on inside the exchange rank 0 gave up on: rank 0 does not keep the job waiting for its
    # acknowledgement (the hand-off's 30 s cap), and says why.
    assert ("rank 3 did not read the verdict (hung: its localization exchange with rank 0 did not complete"
            in runs[0].stderr), runs[0].stderr[-1500:]
