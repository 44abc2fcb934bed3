"""Report paths and --out-dir are checked before the run: one line, exit 2, nothing half done."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from preflight.reports.targets import STDOUT, ReportTargets, unwritable_path
from tests.helpers.ranks import free_port, run_cli


@pytest.mark.parametrize(("flag", "path"), [
    ("--json", "/proc/preflight-nope/r.json"),
    ("--out-dir", "/proc/preflight-nope"),
    ("--html", "/etc/hostname/r.html"),
    ("--junit", "/tmp"),
    ("--json", "/tmp/" + "a-file-name-longer-than-the-os-allows" * 8 + ".json"),  # was an OSError traceback
])
def test_an_unwritable_output_is_one_line_and_exit_2_before_the_run(flag: str, path: str) -> None:
    env = {"RANK": "0", "WORLD_SIZE": "2", "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(free_port())}
    # WORLD_SIZE 2 with no rank 1: a run that started would wait out --timeout and exit 3.
    done = run_cli(["--skip", "probe", "--timeout", "30", flag, path], env=env)
    assert done.returncode == 2, done.stdout + done.stderr
    assert "Traceback" not in done.stderr and f"cannot write {flag} {path}" in done.stderr
    assert len(done.stderr.strip().splitlines()) == 1


def test_a_writable_path_is_created_as_the_writer_would(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)  # inside the current directory's tree, missing folders are created
    assert unwritable_path(tmp_path / "a" / "b" / "r.json") == ""
    assert (tmp_path / "a" / "b").is_dir() and not list((tmp_path / "a" / "b").iterdir())
    assert unwritable_path(tmp_path, directory=True) == ""
    assert unwritable_path(tmp_path / "a") == "is a folder"


def test_missing_folders_outside_the_current_directory_are_not_created(tmp_path: Path,
                                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "here").mkdir()
    monkeypatch.chdir(tmp_path / "here")
    why = unwritable_path(tmp_path / "elsewhere" / "r.json")
    assert "does not exist" in why and "create it first" in why and not (tmp_path / "elsewhere").exists()
    assert unwritable_path(tmp_path / "r.json") == ""  # an existing folder outside the tree is fine


@pytest.mark.parametrize("field", ["json", "html", "junit", "text", "exclude", "retry_exclude", "hostfile"])
def test_the_users_lines_go_to_stderr_only_when_a_report_holds_stdout(field: str) -> None:
    # One owner for both callers (write_reports' verdict, `preflight report --keep`'s host choice).
    assert ReportTargets(**{field: STDOUT}).console() is sys.stderr
    assert ReportTargets(**{field: "r.out"}).console() is sys.stdout
    assert ReportTargets().console() is sys.stdout
    # Under `preflight launch` rank 0 writes the `-` report to a file; the launcher holds stdout for it.
    assert ReportTargets(**{field: "r.out"}, stdout_held=True).console() is sys.stderr
    assert ReportTargets(**{field: STDOUT}).stdout_flag() == ReportTargets(**{field: "x"}).paths().popitem()[0]
