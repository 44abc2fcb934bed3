"""A run that measured nothing is never a pass (issue 45): could-not-run (exit 4) with the reason."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from tests.helpers.ranks import read_json, run_cli


def test_send_recv_without_a_pipeline_dimension_is_could_not_run(tmp_path: Path) -> None:
    out = tmp_path / "r.json"
    done = run_cli(["launch", "-n", "4", "--mesh", "tp2", "--ops", "send_recv", "--json", str(out)], timeout=240)
    report = read_json(out)
    assert done.returncode == 4 and report["exit_code"] == 4, done.stdout
    [finding] = [f for f in report["findings"] if f["check_id"] == "RUN012"]
    assert finding["severity"] == "could-not-run" and "send_recv needs a pipeline dimension" in finding["message"]
    assert done.stdout.startswith("preflight: INCOMPLETE (exit 4): RUN012 send_recv needs a pipeline dimension")
    # No collective ran: the probe checks did not pass, they were skipped with the reason.
    bw = {c["check_id"]: c for c in report["checks"] if c["check_id"] in ("BW001", "BW003", "BW005")}
    assert {c["status"] for c in bw.values()} == {"skipped"}, bw


def test_a_run_with_no_launcher_says_so_first_and_is_could_not_run(tmp_path: Path) -> None:
    out = tmp_path / "r.json"
    done = run_cli(["run", "--ops", "all_reduce", "--sizes", "64KiB", "--iters", "1", "--json", str(out)],
                   timeout=180)
    assert done.stderr.splitlines()[0].startswith("preflight: no launcher found"), done.stderr
    assert done.returncode == 4, done.stdout
    assert "RUN012 one rank: no collective to measure" in done.stdout.splitlines()[0]
    assert "no launcher: one process on" in done.stdout.splitlines()[1]
    # The lone rank's figures are no measurement: the report says it could not run.
    assert read_json(out)["verdict"] == "incomplete"


@pytest.mark.skipif(shutil.which("nvidia-smi") is not None, reason="this machine has an NVIDIA driver")
def test_only_gpu_without_a_driver_checked_nothing_and_is_could_not_run(tmp_path: Path) -> None:
    out = tmp_path / "r.json"
    done = run_cli(["launch", "-n", "2", "--only", "gpu", "--json", str(out)], timeout=240)
    assert done.returncode == 4, done.stdout
    messages = [f["message"] for f in read_json(out)["findings"] if f["check_id"] == "RUN012"]
    assert messages == ["no NVIDIA driver: --only gpu checked nothing"]
