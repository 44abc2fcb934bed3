"""Where rank 0 writes the reports: a run's `--json/--html/...` options, or `preflight report`'s."""

from __future__ import annotations

import os
import tempfile
from dataclasses import dataclass
from pathlib import Path

from preflight.lib.errors import BadInput


@dataclass
class ReportTargets:
    """Where rank 0 writes the reports (`preflight report` re-renders to the same targets)."""

    json: str | None = None  # --json: the JobReport
    html: str | None = None  # --html: self-contained HTML
    junit: str | None = None  # --junit: JUnit XML
    text: str | None = None  # --text: the plain text report
    exclude: str | None = None  # --exclude-file: bad hosts, one per line
    retry_exclude: str | None = None  # --retry-exclude-file: the hosts a resubmission excludes, or none
    hostfile: str | None = None  # --hostfile (`preflight report --keep N`): the kept hosts, one per line
    quiet: bool = False  # --quiet: nothing on stdout

    def paths(self) -> dict[str, str]:
        """Each requested file by its flag."""
        flags = {"--json": self.json, "--html": self.html, "--junit": self.junit, "--text": self.text,
                 "--exclude-file": self.exclude, "--retry-exclude-file": self.retry_exclude,
                 "--hostfile": self.hostfile}
        return {flag: path for flag, path in flags.items() if path}

    def unwritable(self) -> str:
        """Why a requested report could not be written ("" when all can), found before the run, not after it."""
        for flag, path in self.paths().items():
            reason = unwritable_path(Path(path))
            if reason:
                return f"{flag} {path}: {reason}"
        return ""


def unwritable_path(path: Path, directory: bool = False) -> str:
    """Why `path` (a file, or a directory to create) cannot be written; "" when it can.

    It tries for real, as the writer will: creates the folder (the writer would too) and a
    temporary file in it, removed at once. Permission bits alone do not tell (root, /proc).
    """
    folder = path if directory else path.parent
    if not directory and path.is_dir():
        return "is a folder"
    try:
        folder.mkdir(parents=True, exist_ok=True)
        with tempfile.NamedTemporaryFile(dir=folder, prefix=".preflight-write-test-"):
            pass
    except OSError as exc:
        return f"{exc.strerror or type(exc).__name__} ({exc.filename or folder})"
    if not directory and path.exists() and not os.access(path, os.W_OK):
        return "exists and is not writable by this user"
    return ""


def refuse_unwritable(targets: ReportTargets, out_dir: str | None, writes_reports: bool) -> None:
    """An output that cannot be written is bad input, found before the run (exit 2), not after it."""
    why = targets.unwritable() if writes_reports else ""  # only rank 0 writes reports
    folder = unwritable_path(Path(out_dir), directory=True) if out_dir else ""
    if folder:
        why = why or f"--out-dir {out_dir}: {folder}"
    if why:
        raise BadInput(f"cannot write {why}")
