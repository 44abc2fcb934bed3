"""Every output a run or `preflight report` writes is announced, one line each on stderr, with where it went
(an absolute path: a relative one, or SQLAlchemy's three-slash sqlite URL, is relative to a folder the
reader may not think of) and its size: `preflight: wrote json report /home/me/r.json (36 kB)`."""

from __future__ import annotations

import os
import sys
from collections.abc import Sequence

from preflight.lib.units import file_size

REPORT_FLAGS = ("--json", "--html", "--junit", "--text")


def written_line(flag: str, path: str) -> str:
    """`preflight: wrote html report /abs/r.html (120 kB)` (`exclude-file`, `metrics`, ... without `report`)."""
    what = flag.lstrip("-") + (" report" if flag in REPORT_FLAGS else "")
    return f"preflight: wrote {what} {os.path.abspath(path)}{_size(path)}"


def history_line(shown_url: str, path: str | None) -> str:
    """`preflight: recorded the run in history /abs/h.db (sqlite, 96 kB)`; a server's URL without its password.

    shown_url: the URL as the history shows it (password hidden); path: its sqlite file, None for a server
    (both from history/store.py, read by the caller: reports/ does not import the history layer)."""
    if path is None:
        return f"preflight: recorded the run in history {shown_url}"
    size = _size(path).strip(" ()")
    line = f"preflight: recorded the run in history {os.path.abspath(path)} (sqlite{', ' + size if size else ''})"
    if not os.path.isabs(path):  # SQLAlchemy's three slashes: relative to the current folder, which surprises
        line += f"; sqlite:///{path} is relative to the current folder, sqlite:////{path} would be /{path}"
    return line


def announce(lines: Sequence[str]) -> None:
    """Print the lines on stderr (stdout is the report)."""
    for line in lines:
        print(line, file=sys.stderr)
    sys.stderr.flush()


def _size(path: str) -> str:
    try:
        return f" ({file_size(os.path.getsize(path))})"
    except OSError:
        return ""
