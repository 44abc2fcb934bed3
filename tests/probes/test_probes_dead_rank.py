"""A rank killed during the probes is named as dead by its stopped heartbeat, long before --probe-timeout.

Rank 3 is killed (SIGKILL) as it starts to form the probes' process group: the others would
wait in the store for it until the process group's timeout (--probe-timeout + 5 s) and then
report only that the probes could not run, naming nobody.
"""

from __future__ import annotations

from pathlib import Path

from tests.helpers.ranks import Placement, plant_env, read_json, spawn_env_ranks

KILLED_AT_PROCESS_GROUP = """
import os, signal, torch.distributed as dist
def init_process_group(*args, **kwargs):
    os.kill(os.getpid(), signal.SIGKILL)
dist.init_process_group = init_process_group
"""
PROBE_TIMEOUT_S = 300  # the old way out: 305 s; far beyond the bound below
EXIT_BOUND_S = 200  # "does not hang": imports of 4 ranks on 2 loaded cores plus the heartbeat's stall


def test_rank_killed_as_the_probes_start_is_named_dead_and_the_others_exit_3(tmp_path: Path) -> None:
    report_path = tmp_path / "r.json"
    runs = spawn_env_ranks(4, ["--ops", "all_reduce", "--sizes", "64KiB", "--iters", "2", "--warmup", "1",
                               "--probe-timeout", str(PROBE_TIMEOUT_S), "--json", str(report_path)],
                           place={3: Placement(env=plant_env(tmp_path, {3: KILLED_AT_PROCESS_GROUP}))},
                           timeout=EXIT_BOUND_S)
    assert runs[3].returncode == -9
    for rank in (0, 1, 2):
        assert runs[rank].returncode == 3, (rank, runs[rank].stdout[-800:], runs[rank].stderr[-800:])
    report = read_json(report_path)
    [dead] = [f for f in report["findings"] if f["check_id"] == "RUN008"]
    assert dead["ranks"] == [3] and "heartbeat" in dead["message"], dead
    assert report["exit_code"] == 3 and report["bad_hosts"] == dead["hosts"]
    assert not [f for f in report["findings"] if f["check_id"] == "BW009"]  # not "could not run", naming nobody
