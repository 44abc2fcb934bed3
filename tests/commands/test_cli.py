"""The CLI as a user meets it: bad input is one line and exit 2, never a traceback."""

from __future__ import annotations

import subprocess
import sys

import pytest

from preflight.reports.json import load as load_report
from tests.helpers.ranks import base_env, run_cli


@pytest.mark.parametrize(
    ("args", "env", "expected"),
    [
        ([], {"RANK": "abc", "WORLD_SIZE": "2"}, "RANK='abc' is not an integer"),
        ([], {"RANK": "0", "WORLD_SIZE": "0"}, "WORLD_SIZE='0' must be >= 1"),
        ([], {"RANK": "2", "WORLD_SIZE": "2"}, "rank 2 is not below world size 2"),
        ([], {"RANK": "0", "WORLD_SIZE": "2", "LOCAL_RANK": "-1"}, "LOCAL_RANK='-1'"),
        ([], {"RANK": "0", "WORLD_SIZE": "2", "MASTER_PORT": "99999"}, "MASTER_PORT='99999'"),
        ([], {"SLURM_PROCID": "0", "SLURM_NTASKS": "1", "SLURM_JOB_NODELIST": "gpu[1-"}, "hostlist 'gpu[1-'"),
        (["--no-such-flag"], {}, "unrecognized arguments: --no-such-flag"),
        (["--silence", "NOPE999"], {}, "no such check id"),
        (["--only", "nosuchtag"], {}, "unknown tag 'nosuchtag'"),
        (["--timeout", "-1"], {}, "must be positive"),
        (["explain", "XYZ123"], {}, "no check with id"),
    ],
)
def test_bad_input_is_one_clear_line_and_exit_2(args: list[str], env: dict[str, str], expected: str) -> None:
    result = run_cli(args, env, timeout=60)
    assert result.returncode == 2, result.stderr
    assert expected in result.stderr
    assert "Traceback" not in result.stderr + result.stdout
    error_lines = [line for line in result.stderr.splitlines() if "error" in line]
    assert len(error_lines) == 1


def test_single_process_run_passes_and_prints_a_verdict(tmp_path) -> None:
    result = run_cli(["--json", str(tmp_path / "r.json"), "--skip", "probe"], timeout=120)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "PASSED" in result.stdout
    assert (tmp_path / "r.json").exists()


def test_list_and_explain() -> None:
    listing = run_cli(["list"])
    assert listing.returncode == 0 and "NCCL001" in listing.stdout and "RANK001" in listing.stdout
    explained = run_cli(["explain", "nccl001"])
    assert explained.returncode == 0 and "watchdog" in explained.stdout and "What to do" in explained.stdout


@pytest.mark.parametrize("command", [["list", "--markdown"], ["explain", "BW011"]])
def test_a_reader_that_leaves_early_gets_no_traceback(command: list[str]) -> None:
    """`preflight list | head -1`: the pipe closes before preflight writes; exit 0, no traceback."""
    proc = subprocess.Popen([sys.executable, "-m", "preflight", *command], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env=base_env())
    assert proc.stdout is not None
    proc.stdout.close()  # before the interpreter is even up: every write meets a closed pipe
    _, stderr = proc.communicate(timeout=60)
    assert proc.returncode == 0 and "Traceback" not in stderr, stderr


@pytest.mark.parametrize("command", [["launch", "-n", "2", "--skip", "probe"], ["run", "--skip", "probe"],
                                     ["report", "r.json"]])
def test_a_removed_current_folder_is_one_clear_line_and_exit_2(tmp_path, command: list[str]) -> None:
    """A shell left in a folder that was removed (a job's scratch cleaned under it): `launch` died with a
    FileNotFoundError traceback, a rank in torch's import with MKL's "Cannot load libtorch_cpu.so"."""
    gone = tmp_path / "scratch"
    gone.mkdir()
    script = 'cd "$1" && rmdir "$1" && shift && exec "$@"'
    result = subprocess.run(["bash", "-c", script, "bash", str(gone), sys.executable, "-m", "preflight", *command],
                            env=base_env(), capture_output=True, text=True, timeout=120)
    assert result.returncode == 2, result.stdout + result.stderr
    assert result.stderr.strip() == ("preflight: error: the current folder no longer exists (removed while this "
                                     "shell was in it): cd to one that does"), result.stderr


@pytest.mark.parametrize("command", [["launch", "-n", "2"], ["run"]])
def test_a_run_started_with_its_standard_streams_closed_still_passes(tmp_path, command: list[str]) -> None:
    """`preflight launch ... >&-` (a daemon or job wrapper that closed them): Python left sys.stdout None
    and rank 0's report print was a traceback (exit 1, the verdict file never written); the forkserver
    had no descriptor 1 at all, so the next file a rank opened would have taken the terminal's place."""
    report = tmp_path / "r.json"
    script = 'exec "$@" <&- >&-'
    result = subprocess.run(["bash", "-c", script, "bash", sys.executable, "-m", "preflight", *command,
                             "--skip", "probe", "--json", str(report)],
                            env=base_env(), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, timeout=180)
    assert result.returncode == 0, result.stderr
    assert "Traceback" not in result.stderr, result.stderr
    assert load_report(report).exit_code == 0
