"""One rule for every output a user asks for (preflight/reports/targets.py).

An output that cannot be written is one line and exit 2 before the run (or before `preflight
report` reads anything); one that fails after the verdict exits 4 when the run passed, and the
headline starts with `NOT WRITTEN:` and names it (a run's history: tests/history/test_run_history.py).
A missing folder is created inside the current directory's tree only: never elsewhere.
"""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from preflight.model import JobReport, ReportMeta
from preflight.reports.json import dumps
from preflight.reports.json import load as load_report
from tests.helpers.ranks import run_cli

UNWRITABLE = "/proc/preflight-no-such/out"  # /proc refuses new files, even to root

RUN_OUTPUTS = [("--json", UNWRITABLE + ".json"), ("--html", UNWRITABLE + ".html"), ("--junit", UNWRITABLE + ".xml"),
               ("--text", UNWRITABLE + ".txt"), ("--exclude-file", UNWRITABLE + ".exclude"),
               ("--metrics", UNWRITABLE + ".prom"), ("--history", f"sqlite:///{UNWRITABLE}.db")]
REPORT_OUTPUTS = [("--json", UNWRITABLE + ".json"), ("--html", UNWRITABLE + ".html"),
                  ("--junit", UNWRITABLE + ".xml"), ("--text", UNWRITABLE + ".txt"),
                  ("--exclude-file", UNWRITABLE + ".exclude"), ("--retry-exclude-file", UNWRITABLE + ".retry")]


def _one_line_exit_2(done: subprocess.CompletedProcess[str], flag: str) -> None:
    lines = done.stderr.strip().splitlines()
    assert done.returncode == 2 and len(lines) == 1, (done.returncode, done.stderr)
    assert f"cannot write {flag} " in lines[0] and "Traceback" not in done.stderr, lines[0]
    assert ".preflight-write-test" not in lines[0], lines[0]  # no internal temp name (issue 45)


@pytest.mark.parametrize(("flag", "path"), RUN_OUTPUTS, ids=[flag for flag, _ in RUN_OUTPUTS])
def test_run_refuses_an_unwritable_output_before_it_starts(flag: str, path: str) -> None:
    _one_line_exit_2(run_cli(["run", flag, path, "--quiet"], timeout=60), flag)


def test_launch_refuses_before_any_rank_starts() -> None:
    done = run_cli(["launch", "-n", "2", "--html", UNWRITABLE + ".html"], timeout=60)
    _one_line_exit_2(done, "--html")
    assert "rank" not in done.stdout


@pytest.fixture
def saved_report(tmp_path: Path) -> Path:
    """A passing report on disk, as `preflight --json` writes one."""
    report = JobReport(meta=ReportMeta("env", "", "r", 1, 1, "127.0.0.1", 1), verdict="passed", exit_code=0,
                       why="every check passed")
    path = tmp_path / "r.json"
    path.write_text(dumps(report))
    return path


@pytest.mark.parametrize(("flag", "path"), REPORT_OUTPUTS, ids=[flag for flag, _ in REPORT_OUTPUTS])
def test_report_refuses_an_unwritable_output_before_it_reads(flag: str, path: str, saved_report: Path) -> None:
    _one_line_exit_2(run_cli(["report", str(saved_report), flag, path]), flag)


def test_report_refuses_an_unwritable_hostfile(saved_report: Path) -> None:
    _one_line_exit_2(run_cli(["report", str(saved_report), "--keep", "1", "--hostfile", UNWRITABLE]), "--hostfile")


@pytest.mark.parametrize("command", ["report", "run"])
def test_no_folder_is_created_outside_the_current_directory(command: str, tmp_path: Path,
                                                             saved_report: Path) -> None:
    here, elsewhere = tmp_path / "here", tmp_path / "elsewhere"
    here.mkdir()
    target = elsewhere / "deeper" / "r.html"
    args = ["report", str(saved_report)] if command == "report" else ["run", "--quiet"]
    done = run_cli([*args, "--html", str(target)], cwd=str(here))
    _one_line_exit_2(done, "--html")
    assert "create it first" in done.stderr and not elsewhere.exists()


def test_folders_inside_the_current_directory_are_created(tmp_path: Path, saved_report: Path) -> None:
    done = run_cli(["report", str(saved_report), "--html", "reports/run1/r.html"], cwd=str(tmp_path))
    assert done.returncode == 0, done.stderr
    assert (tmp_path / "reports" / "run1" / "r.html").stat().st_size > 0


@pytest.fixture
def full_disk(tmp_path: Path) -> Iterator[Path]:
    """A real filesystem of 16 KiB: a small file fits (the check before the run passes), a report does not."""
    mount = tmp_path / "full"
    mount.mkdir()
    made = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=16k", "tmpfs", str(mount)], capture_output=True)
    if made.returncode:
        pytest.skip(f"cannot mount a tmpfs here (needs root): {made.stderr.decode()[:200]}")
    try:
        yield mount
    finally:
        subprocess.run(["umount", str(mount)], check=True)


def test_report_output_failing_while_written_exits_4_and_the_headline_says_so(full_disk: Path,
                                                                             saved_report: Path) -> None:
    big = saved_report.parent / "big.json"
    from preflight.reports.json import load

    report = load(str(saved_report))
    report.why = "x" * 200_000  # the HTML holds it: well over the 16 KiB the disk has
    big.write_text(dumps(report))
    done = run_cli(["report", str(big), "--html", str(full_disk / "r.html"), "--text", str(saved_report.parent / "t")])
    assert done.returncode == 4, done.stderr
    assert done.stdout.startswith(f"preflight: INCOMPLETE (exit 4): NOT WRITTEN: --html {full_disk / 'r.html'}; ")
    assert f"could not write --html {full_disk / 'r.html'}" in done.stderr
    assert not (full_disk / "r.html").exists() and (saved_report.parent / "t").exists()


def test_a_folder_that_refuses_files_is_named_without_the_probe_files_name() -> None:
    """/proc exists but takes no new file: the user's folder and the OS's reason, no `.preflight-write-test-...`."""
    from preflight.reports.targets import unwritable_path

    why = unwritable_path(Path("/proc/r.json"))
    assert why.startswith("cannot create a file in /proc (") and "write-test" not in why, why


def _report_on(stdout: str) -> JobReport:
    from preflight.reports.json import loads

    return loads(stdout)  # BadPayload (the test fails) when stdout holds anything but the one report


def test_a_report_asked_for_as_dash_is_stdout_alone_and_the_verdict_goes_to_stderr(tmp_path: Path) -> None:
    """`--json -` as `preflight history --json` does it: stdout holds the report alone (`| jq`), the verdict goes
    to stderr, and no file named `-` is made."""
    done = run_cli(["run", "--json", "-"], cwd=str(tmp_path))
    report = _report_on(done.stdout)
    assert done.returncode == report.exit_code and report.meta.world_size == 1, done.stderr
    assert f"preflight: {report.verdict.upper()} (exit {report.exit_code})" in done.stderr
    assert "wrote json report" not in done.stderr and not (tmp_path / "-").exists()


def test_report_writes_one_format_to_stdout_and_the_others_to_their_files(saved_report: Path, tmp_path: Path) -> None:
    done = run_cli(["report", str(saved_report), "--json", "-", "--text", "t.txt"], cwd=str(tmp_path))
    assert done.returncode == 0, done.stderr
    assert _report_on(done.stdout).why == "every check passed"
    assert "preflight: PASSED (exit 0)" in done.stderr and "wrote text report" in done.stderr
    assert (tmp_path / "t.txt").read_text().startswith("preflight: PASSED") and not (tmp_path / "-").exists()
    kept = run_cli(["report", str(saved_report), "--keep", "1", "--junit", "-"], cwd=str(tmp_path))
    assert kept.stdout.startswith("<?xml") and kept.stdout.rstrip().endswith(">"), kept.stdout[-300:]
    assert "hosts: keep 1" in kept.stderr  # the host choice beside it, on stderr: stdout is the XML alone


def test_two_reports_to_stdout_are_one_line_and_exit_2(saved_report: Path) -> None:
    _one_line_exit_2(run_cli(["report", str(saved_report), "--json", "-", "--text", "-"]), "--json")
    done = run_cli(["run", "--html", "-", "--junit", "-", "--quiet"], timeout=60)
    _one_line_exit_2(done, "--html")
    assert "only one report can go to stdout" in done.stderr


def test_a_reader_that_stops_early_is_no_error(saved_report: Path) -> None:
    """`preflight report r.json --json - | head -c 10`: a report larger than the pipe holds, its reader gone
    after ten bytes: the run's own exit code, no traceback."""
    from preflight.reports.json import load

    report = load(str(saved_report))
    report.why = "x" * 300_000  # more than a pipe's buffer: the writer meets the closed pipe
    saved_report.write_text(dumps(report))
    from tests.helpers.ranks import PYTHON, base_env

    proc = subprocess.Popen([PYTHON, "-m", "preflight", "report", str(saved_report), "--json", "-"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=base_env(None))
    assert proc.stdout is not None and proc.stdout.read(10).startswith(b"{")
    proc.stdout.close()
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 0 and b"Traceback" not in err and b"Broken pipe" not in err, err[-2000:]


def test_launch_writes_the_dash_report_to_stdout_alone_and_the_verdict_to_stderr(tmp_path: Path) -> None:
    """Under `preflight launch` rank 0 writes the `-` report to a file of the launcher's, which writes it to
    stdout after the run (amended there when a rank died: tests/commands/test_launch.py): stdout holds rank 0's
    report once, alone; its verdict is on stderr. `--text -` goes through the launcher's own file, `--json -`
    through rank 0's JSON (test_launch.py's dead-rank test)."""
    done = run_cli(["launch", "-n", "2", "--text", "-", "--json", "r.json"], cwd=str(tmp_path))
    report = load_report(tmp_path / "r.json")
    assert report.meta.world_size == 2 and done.returncode == report.exit_code, done.stderr
    headline = f"preflight: {report.verdict.upper()} (exit {report.exit_code})"
    assert done.stdout.startswith(headline) and done.stdout.count(headline) == 1, done.stdout
    assert headline in done.stderr and not (tmp_path / "-").exists()
