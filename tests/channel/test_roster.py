"""Who is in the run's store: two real env:// jobs on one MASTER_PORT never mix (channel/roster.py).

Job A and job B: two real `preflight run` ranks each, env://, the same MASTER_PORT, no job
id, so both are run `env` of world size 2 and carry the same store mark. A's rank 0 hosts the
store; B's rank 0 finds the port held (PORT001) and claims rank 0 in A's store; then the
followers of both jobs start at once and each claims its rank there. Before this, a rank of B
was counted as A's.
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from preflight.channel import keys, roster
from preflight.channel.collected import Collected
from preflight.channel.exchange import Exchange, RankPayload
from preflight.channel.keys import beat_key
from preflight.channel.liveness import RankLiveness
from preflight.model import ExitCode, RankFacts, World
from preflight.reports.json import load as load_report
from tests.helpers.ranks import free_port, start_rank, wait_for_ranks

FAST = ["run", "--skip", "probe", "--timeout", "30"]
BOUND_S = 120  # "does not hang": four processes importing torch on two loaded cores


def test_two_jobs_on_one_port_without_job_ids_are_named_and_never_mixed(tmp_path: Path) -> None:
    port, started = free_port(), time.monotonic()
    jsons = {job: tmp_path / f"{job}.json" for job in "ab"}
    zeros = {job: start_rank(0, 2, [*FAST, "--json", str(jsons[job])], port=port) for job in "ab"}
    # Both rank 0s at once: one hosts the store (job A, from here on), the other finds the port
    # held and ends at once (job B). It ends before any follower starts, so A's rank 0 knows a
    # second job is on its port first; the followers' order is then a free race.
    while all(proc.poll() is None for proc in zeros.values()) and time.monotonic() - started < BOUND_S:
        time.sleep(0.05)
    b = "a" if zeros["a"].poll() is not None else "b"
    a = "b" if b == "a" else "a"
    a0, b0, a_json, b_json = zeros[a], zeros[b], jsons[a], jsons[b]
    b0_run = wait_for_ranks({0: b0}, started, BOUND_S)[0]
    followers = {(job, 1): start_rank(1, 2, [*FAST, "--json", str(tmp_path / f"{job}1.json")], port=port)
                 for job in "ab"}
    pids = {key: proc.pid for key, proc in followers.items()}
    runs = wait_for_ranks({0: a0, **followers}, started, BOUND_S)  # type: ignore[dict-item]

    # B's rank 0 could not host (PORT001 when its facts already saw the port held; RUN001 says why).
    assert b0_run.returncode == int(ExitCode.FAILED), b0_run.stdout[-2000:] + b0_run.stderr[-2000:]
    assert any("another job's rank 0 hosts it" in f.message for f in load_report(b_json).findings)

    assert runs[0].returncode == int(ExitCode.FAILED), runs[0].stdout[-2000:] + runs[0].stderr[-2000:]
    report = load_report(a_json)
    # Nobody but A's rank 0 is counted: each follower rank had two claimants, one from each job.
    assert [(r.rank, r.system.pid) for r in report.ranks] == [(0, a0.pid)] and report.missing_ranks == []
    contested = {f.ranks[0]: f.message for f in report.findings if f.check_id == "RANK002"}
    assert sorted(contested) == [0, 1], report.findings
    assert f"pid {b0.pid}" in contested[0] and f"pid {a0.pid}" in contested[0]
    assert f"pid {pids[('a', 1)]}" in contested[1] and f"pid {pids[('b', 1)]}" in contested[1]
    assert "two jobs share MASTER_ADDR:MASTER_PORT" in contested[1]
    assert not [f for f in report.findings if f.check_id == "RANK001"]  # claimed twice is not "missing"

    codes = sorted(runs[(job, 1)].returncode for job in "ab")  # type: ignore[index]
    # The second claimant stops at its claim with one line; the first gets A's verdict.
    assert codes == [int(ExitCode.BAD_INPUT), int(ExitCode.FAILED)], codes
    [second] = [runs[(job, 1)] for job in "ab" if runs[(job, 1)].returncode == 2]  # type: ignore[index]
    assert "rank 1 of run 'env'" in second.stderr and "is already claimed by" in second.stderr
    assert "Traceback" not in second.stderr


def _world(rank: int, port: int, size: int = 3) -> World:
    return World(launcher="env", rank=rank, world_size=size, host=f"node{rank}", master_addr="127.0.0.1",
                 master_port=port, run_id="env")


def test_a_job_of_another_world_size_on_the_port_refuses_the_store_and_claims_nothing() -> None:
    lead = Exchange(_world(0, 0), timeout_s=10.0)
    lead.open()
    other = Exchange(_world(1, lead.world.master_port, size=2), timeout_s=10.0)  # same run id "env"
    other.open()
    assert other.store is None and other.foreign and "world size 2" in other.store_error  # PORT004, exit 4
    assert roster.listed(lead.store, keys.CLAIMED.key, 3) == {0}
    assert lead.collect(timeout_s=0.3).duplicates == {}


def test_a_second_claimant_is_refused_with_one_line_and_the_rank_counts_as_neither() -> None:
    lead = Exchange(_world(0, 0), timeout_s=10.0)
    lead.open()
    first = Exchange(_world(1, lead.world.master_port), timeout_s=10.0)
    first.open()
    first.publish(RankPayload(1, RankFacts(rank=1, host="node1", world=first.world)))
    with pytest.raises(roster.RankTaken, match=r"rank 1 of run 'env' .* is already claimed by node1 pid \d+"):
        Exchange(_world(1, lead.world.master_port), timeout_s=10.0).open()
    collected = lead.collect(timeout_s=0.5)
    assert 1 not in collected.payloads  # the first claimant's payload is dropped too
    assert [host for host, _ in collected.duplicates[1]] == ["node1", "node1"] and 1 not in collected.missing(3)


def test_rank_0_names_a_joined_rank_whose_beat_stopped_and_not_one_that_beats() -> None:
    lead = Exchange(_world(0, 0), timeout_s=10.0)
    lead.open()
    for rank in (1, 2):
        roster.claim(lead.store, rank, f"node{rank}")  # joined; neither beats on its own here
    watch, collected = RankLiveness(3, 0, lead.store), Collected()
    watch.look(now=100.0)
    lead.store.add(beat_key(1), 1)  # rank 1 beats, rank 2 is silent
    roster.take_dead(lead.store, collected, watch.look(now=100.0 + watch.stall_s))
    assert sorted(collected.dead) == [2] and collected.dead[2].host == "node2"
    assert "heartbeat stopped" in collected.dead[2].how and collected.complete(3) is False


def test_garbage_a_foreign_client_appends_to_the_arrivals_list_is_ignored_by_the_collect() -> None:
    """The arrivals list is read as roster.listed reads the claims: only ASCII ranks of this world."""
    lead = Exchange(_world(0, 0), timeout_s=10.0)
    lead.open()
    first = Exchange(_world(1, lead.world.master_port), timeout_s=10.0)
    first.open()
    first.publish(RankPayload(1, RankFacts(rank=1, host="node1", world=first.world)))
    lead.store.append("arrivals", "x,²,-3,99,")
    collected = lead.collect(timeout_s=0.5)
    assert sorted(collected.payloads) == [1] and collected.missing(3) == [2]
