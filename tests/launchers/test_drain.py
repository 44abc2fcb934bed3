"""`preflight report r.json --drain [--yes]` against a real Slurm (the session's slurm_netns lab).

A real preflight job runs over 3 of the 4 network-namespace nodes with one node planted bad as
test_sbatch.py plants it (NCCL_SOCKET_IFNAME naming no interface on that node only). Then, with
Slurm's own scontrol: a dry run changes nothing; `--drain --yes` leaves exactly that node in DRAIN
with preflight's reason; an unreachable slurmctld is one line and a non-zero exit. The drained
node is resumed afterwards (the lab is shared by the session's other Slurm tests).
"""

from __future__ import annotations

import re
import subprocess
import time
from pathlib import Path

import pytest

from tests.helpers.slurm import SlurmCluster
from tests.launchers.test_sbatch import BIN, SBATCH, _env, _faulty

pytestmark = pytest.mark.slurm


def _node(cluster: SlurmCluster, name: str) -> tuple[str, str]:
    """(State, Reason) of a node as `scontrol show node` prints them."""
    out = subprocess.run(cluster.command(["scontrol", "show", "node", name]), env=cluster.env(),
                         capture_output=True, text=True, timeout=30).stdout
    state = re.search(r"\bState=(\S+)", out)
    # Its own line: `   Reason=<text> [root@2026-11-26T06:20:00]` (who set it, when).
    reason = re.search(r"^\s*Reason=(.*?)(?: \[[^\]]*\])?\s*$", out, re.MULTILINE)
    return (state.group(1) if state else ""), (reason.group(1) if reason else "")


def _report_cli(cluster: SlurmCluster, args: list[str], env: dict[str, str] | None = None
                ) -> subprocess.CompletedProcess[str]:
    return subprocess.run(cluster.command([f"{BIN}/preflight", "report", *args]), env=env or cluster.env(),
                          capture_output=True, text=True, timeout=180)


def test_drain_yes_drains_exactly_the_bad_node_with_its_reason(slurm_netns: SlurmCluster, tmp_path: Path) -> None:
    n1, n2, n3 = slurm_netns.node_names[:3]
    env = _env(slurm_netns, tmp_path, PREFLIGHT=_faulty(tmp_path, n2), PREFLIGHT_TIMEOUT="40")
    job, state = slurm_netns.sbatch(SBATCH / "preflight.sbatch", ["-N", "3", "--ntasks-per-node=1"], [], env,
                                    cwd=tmp_path)
    assert "ExitCode=3:0" in state, state
    report = str(tmp_path / f"preflight-{job}" / "report.json")
    try:
        dry = _report_cli(slurm_netns, [report, "--drain"])
        assert dry.returncode == 0, dry.stderr
        [command] = [line for line in dry.stdout.splitlines() if line.startswith("scontrol ")]
        assert command.startswith(f'scontrol update NodeName={n2} State=DRAIN Reason="preflight NCCL008: ')
        assert [_node(slurm_netns, n)[0] for n in (n1, n2, n3)] == ["IDLE"] * 3  # a dry run changes nothing

        done = _report_cli(slurm_netns, [report, "--drain", "--yes"])
        assert done.returncode == 0, done.stdout + done.stderr
        drained_state, reason = _node(slurm_netns, n2)
        assert "DRAIN" in drained_state, drained_state
        assert reason == command.split('Reason="', 1)[1].rstrip('"') and reason.startswith("preflight NCCL008: ")
        assert "nosuch0" in reason and len(reason) <= 200
        others = [slurm_netns.node_names[i] for i in (0, 2, 3)]
        assert [_node(slurm_netns, n)[0] for n in others] == ["IDLE"] * 3

        # slurmctld unreachable: a copy of the config naming a port nobody listens on.
        conf = tmp_path / "unreachable.conf"
        conf.write_text(re.sub(r"SlurmctldPort=\d+", "SlurmctldPort=1", slurm_netns.conf.read_text()))
        failed = _report_cli(slurm_netns, [report, "--drain", "--yes"], env=slurm_netns.env({"SLURM_CONF": str(conf)}))
        errors = [line for line in failed.stderr.splitlines() if line.startswith("preflight: drain")]
        assert failed.returncode == 1 and len(errors) == 1, failed.stderr
        assert n2 in errors[0] and "Traceback" not in failed.stderr
    finally:  # the cluster is the module's neighbours' too (tests/launchers/test_sbatch.py): as it was found
        resumed = subprocess.run(slurm_netns.command(["scontrol", "update", f"NodeName={n2}", "State=RESUME"]),
                                 env=slurm_netns.env(), capture_output=True, text=True, timeout=60)
        deadline = time.monotonic() + 60
        while _node(slurm_netns, n2)[0] != "IDLE" and time.monotonic() < deadline:
            time.sleep(0.2)
    assert _node(slurm_netns, n2)[0] == "IDLE", resumed.stdout + resumed.stderr
