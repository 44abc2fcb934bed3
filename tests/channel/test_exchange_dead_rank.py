"""A rank that dies during the exchange, after it joined the store, is named dead long before --timeout.

Rank 2 is SIGKILLed as it is about to publish its payload (planted from the test side, the one
sitecustomize hook): it has joined the store and beaten. Before, rank 0 waited the whole
--timeout (60 s here) and then said only "rank 2 did not report".
"""

from __future__ import annotations

from pathlib import Path

from preflight.model import ExitCode
from preflight.reports.json import load as load_report
from tests.helpers.ranks import Placement, plant_env, spawn_env_ranks

KILLED_AT_PUBLISH = """
import os, signal
from preflight.channel import exchange
def publish(self, payload):
    os.kill(os.getpid(), signal.SIGKILL)
exchange.Exchange.publish = publish
"""
TIMEOUT_S = 60
BOUND_S = 50  # "does not hang", generous: the beat's 10 s of silence, plus imports on two loaded cores


def test_a_rank_killed_after_joining_is_named_dead_well_before_the_timeout(tmp_path: Path) -> None:
    report_path = tmp_path / "r.json"
    runs = spawn_env_ranks(3, ["--skip", "probe", "--timeout", str(TIMEOUT_S), "--json", str(report_path)],
                           place={2: Placement(env=plant_env(tmp_path, {2: KILLED_AT_PUBLISH}))}, timeout=BOUND_S)
    assert runs[2].returncode == -9
    assert runs[0].returncode == int(ExitCode.FAILED), runs[0].stdout[-2000:] + runs[0].stderr[-2000:]
    assert runs[0].elapsed_s < BOUND_S - 1  # ended on its own, not by the helper's kill at the bound
    assert runs[1].returncode == int(ExitCode.FAILED), runs[1].stdout[-2000:]
    report = load_report(report_path)
    [dead] = [f for f in report.findings if f.check_id == "RUN008"]
    assert dead.ranks == [2] and "during the exchange" in dead.message and "heartbeat stopped" in dead.message
    assert report.missing_ranks == [2] and not [f for f in report.findings if f.check_id == "RANK001"]
    assert report.meta.duration_s < TIMEOUT_S - 10, report.meta.duration_s
    assert report.bad_hosts == dead.hosts
