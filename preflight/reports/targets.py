"""Where rank 0 writes the reports: a run's `--json/--html/...` options, or `preflight report`'s.

One rule for every output a user asks for (the report files, --exclude-file, --hostfile,
--metrics, a sqlite --history): an output that cannot be written is found before the run
where it can be (one line, exit 2); one that fails after the verdict makes the exit code 4
(incomplete) unless the run already failed (3), and the headline starts with what was not
written (`mark_unwritten`). A missing folder is created only inside the current directory's
tree: `--json /nonexistent/dir/r.json` is refused, never a new folder at the filesystem root.
"""

from __future__ import annotations

import os
import sys
import tempfile
from collections.abc import Mapping
from pathlib import Path
from typing import TextIO

from msgspec import Struct

from preflight.lib.errors import BadInput
from preflight.lib.files import ensure_parent
from preflight.model import ExitCode, JobReport


class ReportTargets(Struct):
    """Where rank 0 writes the reports (`preflight report` re-renders to the same targets)."""

    json: str | None = None  # --json: the JobReport
    html: str | None = None  # --html: self-contained HTML
    junit: str | None = None  # --junit: JUnit XML
    text: str | None = None  # --text: the plain text report
    exclude: str | None = None  # --exclude-file: bad hosts, one per line
    retry_exclude: str | None = None  # --retry-exclude-file: the hosts a resubmission excludes, or none
    hostfile: str | None = None  # --hostfile (`preflight report --keep N`): the kept hosts, one per line
    quiet: bool = False  # --quiet: nothing on stdout
    # --stdout-held (launch's own): the launcher writes the report asked for as `-` to stdout itself, after the
    # run (amended when a rank died), so rank 0 writes it to a file and its own lines must keep off stdout.
    stdout_held: bool = False

    def paths(self) -> dict[str, str]:
        """Each requested file by its flag."""
        flags = {"--json": self.json, "--html": self.html, "--junit": self.junit, "--text": self.text,
                 "--exclude-file": self.exclude, "--retry-exclude-file": self.retry_exclude,
                 "--hostfile": self.hostfile}
        return {flag: path for flag, path in flags.items() if path}

    def stdout_flag(self) -> str | None:
        """The flag of the report asked for as `-` (STDOUT), if any (unwritable() refuses a second)."""
        return next((flag for flag, path in self.paths().items() if path == STDOUT), None)

    def console(self) -> TextIO:
        """Where the lines for the user go (the verdict, `--keep`'s host choice): stdout, or stderr when a
        report is asked for as `-` (STDOUT), so that stdout holds that report alone (`--json - | jq`), or
        when the launcher holds stdout for one (stdout_held)."""
        return sys.stderr if self.stdout_held or self.stdout_flag() else sys.stdout

    def unwritable(self) -> str:
        """Why a requested report could not be written ("" when all can), found before the run, not after it.
        `-` is stdout (STDOUT): one report at most can go there."""
        to_stdout = [flag for flag, path in self.paths().items() if path == STDOUT]
        if len(to_stdout) > 1:
            return f"{' -, '.join(to_stdout)} -: only one report can go to stdout (-); give the others a file"
        for flag, path in self.paths().items():
            if path == STDOUT:
                continue
            reason = unwritable_path(Path(path))
            if reason:
                return f"{flag} {path}: {reason}"
        return ""


NOT_WRITTEN = "NOT WRITTEN: "  # the headline's first words when an output was not written
STDOUT = "-"  # a report's PATH that means stdout (`--json -`), as `preflight history --json` writes there


class Unwritten(Struct, frozen=True):
    """An output that was asked for and could not be written after the verdict: which, where, why."""

    flag: str
    path: str
    reason: str


WRITE_TEST = ".preflight-write-test-"  # the temporary file that proves a folder writable


def unwritable_path(path: Path, directory: bool = False) -> str:
    """Why `path` (a file, or a directory to create) cannot be written; "" when it can.

    It tries for real, as the writer will: creates the folder (the writer would too: inside the
    current directory's tree only) and a temporary file in it, removed at once. Permission bits
    alone do not tell (root, /proc).
    """
    folder = path if directory else path.parent
    try:
        if not directory and path.is_dir():  # OSError for a name the OS refuses to look up (too long)
            return "is a folder"
        if directory:
            folder.mkdir(parents=True, exist_ok=True)  # --out-dir names the folder itself: asked for
        else:
            ensure_parent(path)
        with tempfile.NamedTemporaryFile(dir=folder, prefix=WRITE_TEST):
            pass
    except FileNotFoundError as exc:
        if not exc.filename:  # ensure_parent's own sentence (a missing folder outside the current tree)
            return str(exc)
        return _refused(exc, folder)
    except OSError as exc:
        return _refused(exc, folder)
    if not directory and path.exists() and not os.access(path, os.W_OK):
        return "exists and is not writable by this user"
    return ""


def _refused(exc: OSError, folder: Path) -> str:
    """The OS's reason, naming what the user named: the probe file's own name means nothing to them."""
    why = exc.strerror or type(exc).__name__
    if not exc.filename or WRITE_TEST in str(exc.filename):
        return f"cannot create a file in {folder} ({why})"
    return f"{why} ({exc.filename})"


def refuse_unwritable(targets: ReportTargets, out_dir: str | None, writes_reports: bool,
                      files: Mapping[str, str | None] | None = None) -> None:
    """An output that cannot be written is bad input, found before the run (exit 2), not after it.

    Rank 0 writes the reports and `files` (flag -> path: --metrics, a sqlite --history's file,
    RunOptions.output_files; a PostgreSQL server can only be tried when the run is recorded)."""
    why = ""
    if writes_reports:
        why = targets.unwritable()
        for flag, path in (files or {}).items():
            reason = unwritable_path(Path(path)) if path and not why else ""
            why = why or (f"{flag} {path}: {reason}" if reason else "")
    folder = unwritable_path(Path(out_dir), directory=True) if out_dir else ""
    if folder:
        why = why or f"--out-dir {out_dir}: {folder}"
    if why:
        raise BadInput(f"cannot write {why}")


def mark_unwritten(report: JobReport, unwritten: list[Unwritten]) -> None:
    """After the verdict: each output not written is one line on stderr, the headline starts with
    them, and a run that passed exits 4 (incomplete: not everything asked for was done)."""
    if not unwritten:
        return
    for item in unwritten:
        print(f"preflight: could not write {item.flag} {item.path}: {item.reason}", file=sys.stderr)
    if report.exit_code in (int(ExitCode.PASSED), int(ExitCode.WARNINGS_STRICT)):
        report.exit_code, report.verdict = int(ExitCode.INCOMPLETE), "incomplete"
    names = ", ".join(f"{item.flag} {item.path}" for item in unwritten)
    marked = report.why.startswith(NOT_WRITTEN)  # the history's, before the report files' own
    report.why = f"{NOT_WRITTEN}{names}{', ' if marked else '; '}{report.why.removeprefix(NOT_WRITTEN)}"
