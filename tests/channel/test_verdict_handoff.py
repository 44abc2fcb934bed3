"""Every living rank ends with rank 0's verdict: rank 0 keeps the store up for every rank that
beats, not for the count its bookkeeping keeps (issue 23, item 1).

Rank 2 publishes a payload that cannot be read (rank 0 refuses it: RUN002) and rank 3 is slow
to look for the verdict (a loaded node: it waits 3 s before its first look). Before, rank 0
waited for len(reported) - 1 acknowledgements, which rank 1 and the refused rank 2 gave, and
took the store down: rank 3 exited 4 ("no verdict from rank 0") while rank 0 exited 3.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from preflight.reports.json import load as load_report
from tests.helpers.ranks import Placement, plant_env, spawn_env_ranks

PLANTS = {
    2: """
from preflight.channel import exchange
def to_wire(payload):
    return b'{"rank": 2, "facts": "not facts"}'
exchange.to_wire = to_wire
""",
    3: """
import time
from preflight.channel import exchange
_wait_for = exchange.Exchange.wait_for
def wait_for(self, name, timeout_s):
    if name == "verdict":
        time.sleep(3.0)
    return _wait_for(self, name, timeout_s)
exchange.Exchange.wait_for = wait_for
""",
}


@pytest.mark.parametrize("attempt", [1, 2])
def test_a_refused_rank_and_a_slow_rank_both_exit_with_rank_0s_code(tmp_path: Path, attempt: int) -> None:
    report_path = tmp_path / "r.json"
    planted = plant_env(tmp_path, PLANTS)
    runs = spawn_env_ranks(4, ["--skip", "probe", "--timeout", "60", "--json", str(report_path)],
                           place={r: Placement(env=planted) for r in (2, 3)}, timeout=150)
    report = load_report(report_path)
    assert [f.ranks for f in report.findings if f.check_id == "RUN002"] == [[2]]
    assert report.exit_code == 3
    for rank, run in runs.items():
        assert run.returncode == report.exit_code, (rank, run.stdout[-1500:], run.stderr[-800:])
