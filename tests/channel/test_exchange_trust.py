"""A rank speaks only for itself: findings it sends about other ranks or hosts are dropped and reported."""

from __future__ import annotations

from pathlib import Path

from tests.helpers.ranks import Placement, plant_env, read_json, spawn_env_ranks

# Planted from outside the package: rank 2's payload gains a fabricated error about another host.
FABRICATE = """
from preflight.model import Finding, Severity
from preflight.channel import exchange
real = exchange.Exchange.publish
def publish(self, payload):
    payload.findings.append(Finding("NET008", Severity.ERROR, "nodeZ is broken", ranks=[0], hosts=["nodeZ"],
                                    blames_host=True))
    return real(self, payload)
exchange.Exchange.publish = publish
"""


def test_a_fabricated_finding_about_another_host_never_reaches_the_verdict(tmp_path: Path) -> None:
    report_path, exclude = tmp_path / "r.json", tmp_path / "bad-nodes.txt"
    runs = spawn_env_ranks(3, ["--skip", "probe", "--timeout", "30", "--json", str(report_path),
                               "--exclude-file", str(exclude)],
                           place={2: Placement(env=plant_env(tmp_path, {2: FABRICATE}))})
    report = read_json(report_path)
    assert not [f for f in report["findings"] if "nodeZ" in f["hosts"]], report["findings"]
    [dropped] = [f for f in report["findings"] if f["check_id"] == "RUN006"]
    assert dropped["ranks"] == [2] and "NET008" in dropped["message"]
    assert "nodeZ" not in report["bad_hosts"] and "nodeZ" not in exclude.read_text()
    assert {r.returncode for r in runs.values()} == {0}, [r.stdout for r in runs.values()]
