"""Renderers of one JobReport. Each imports the model and pure helpers (preflight.lib) only."""

from __future__ import annotations

import importlib
import os
import shutil
import sys
import tempfile
from collections.abc import Callable, Sequence
from pathlib import Path

from preflight.lib.files import ensure_parent, replacing
from preflight.model import JobReport
from preflight.reports.targets import STDOUT, ReportTargets, Unwritten, mark_unwritten


def write_reports(report: JobReport, targets: ReportTargets, unwritten: Sequence[Unwritten] = (),
                  *, announce: bool | None = None, also_written: Sequence[str] = (),
                  unannounced: str = "") -> list[tuple[str, str]]:
    """Write every requested format, then the verdict to stdout (rich on a TTY, else text), then
    announce each output written on stderr (reports/announce.py; `also_written`: the lines of the
    outputs written before, the history and --metrics); returns what was written, (flag, path) each
    (path `-`: the one written to stdout, not announced).
    `announce` None: unless --quiet. `unannounced`: a folder whose files are not the user's (`preflight
    launch`'s own copy of rank 0's JSON) and are not announced.

    One format failing to render must not cost the others (a report is always written):
    the failure is one line on stderr and the remaining formats are still written. Every
    output not written (these files, and `unwritten`: the history, --metrics) then marks the
    report (targets.mark_unwritten: the headline names them, a pass exits 4) before stdout gets it.
    A report asked for as `-` (targets.STDOUT, at most one) is stdout itself, written after the
    files: the verdict then goes to stderr, so stdout holds that report alone (`--json - | jq`).
    """
    writers: list[tuple[str, str | None, Callable[[JobReport, str], None]]] = [
        ("--json", targets.json, _writer("json", "write")),
        ("--text", targets.text, _writer("text", "write")),
        ("--exclude-file", targets.exclude, _writer("exclude", "write")),
        ("--retry-exclude-file", targets.retry_exclude, _writer("exclude", "write_retry")),
        ("--hostfile", targets.hostfile, _writer("host_choice", "write_hostfile")),
        ("--junit", targets.junit, _writer("junit", "write")),
        ("--html", targets.html, _writer("html", "write")),
    ]
    mark_unwritten(report, list(unwritten))  # known before the files: every file says so too
    written: list[tuple[str, str]] = []
    failed: list[Unwritten] = []
    to_stdout: tuple[str, Callable[[JobReport, str], None]] | None = None
    for flag, path, write in writers:
        if not path:
            continue
        if path == STDOUT:
            to_stdout = (flag, write)  # after the files: it says which of them were not written
            continue
        try:
            _write_whole(write, report, path)
            written.append((flag, path))
        except Exception as exc:  # one renderer's bug or a full disk must not lose the rest
            failed.append(Unwritten(flag, path, f"{type(exc).__name__}: {exc}"))
    mark_unwritten(report, failed)
    if to_stdout is not None and _write_stdout(*to_stdout, report):
        written.append((to_stdout[0], STDOUT))
    if not targets.quiet:
        from preflight.reports import terminal, text

        verdict_to = targets.console()
        if terminal.wants_rich(verdict_to):
            terminal.render(report, verdict_to)
        else:
            verdict_to.write(text.render(report))
            verdict_to.flush()
    if not targets.quiet if announce is None else announce:
        from preflight.reports.announce import announce as say
        from preflight.reports.announce import written_line

        say([*also_written, *(written_line(flag, path) for flag, path in written if path != STDOUT
                              and (not unannounced or Path(path).parent != Path(unannounced)))])
    return written


def _writer(module: str, name: str) -> Callable[[JobReport, str], None]:
    """A renderer's write function, its module imported only when that format is asked for:
    preflight.check(quiet=True) writes none, and the HTML renderer's import alone (jinja2) was
    ~0.2 s of a trainer's first step."""
    def write(report: JobReport, path: str) -> None:
        getattr(importlib.import_module(f"preflight.reports.{module}"), name)(report, path)
    return write


def _write_stdout(flag: str, write: Callable[[JobReport, str], None], report: JobReport) -> bool:
    """The report asked for as `-`, rendered whole into a temporary file first (a renderer that fails
    leaves nothing half-written on stdout: it is marked unwritten like a file, and False returned), then
    copied to stdout. A reader that stops early (`| head`) is no error: the rest is not written."""
    with tempfile.TemporaryDirectory(prefix="preflight-stdout-") as folder:
        rendered = Path(folder, "report")
        try:
            write(report, str(rendered))
        except Exception as exc:
            mark_unwritten(report, [Unwritten(flag, STDOUT, f"{type(exc).__name__}: {exc}")])
            return False
        copy_to_stdout(rendered)
    return True


def copy_to_stdout(rendered: Path) -> None:
    """A report rendered whole into a file, copied to stdout (`preflight launch` hands on rank 0's so).
    A reader that stops early (`| head`) is no error: the rest is not written."""
    sys.stdout.flush()
    try:
        with rendered.open("rb") as source:
            shutil.copyfileobj(source, sys.stdout.buffer)
        sys.stdout.buffer.flush()
    except BrokenPipeError:  # stdout closed by its reader: nothing more goes there, and no error at exit
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)


def _write_whole(write: Callable[[JobReport, str], None], report: JobReport, path: str) -> None:
    """Write to a temporary file beside `path`, then rename it over (preflight/lib/files.py): a
    reader, or a launcher that kills rank 0 mid-write (torchrun's agent stops the workers once
    one exits), never leaves half a report where a whole one is expected."""
    ensure_parent(Path(path))
    with replacing(path) as partial:
        write(report, str(partial))
