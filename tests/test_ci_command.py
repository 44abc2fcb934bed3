"""The README's test command, docs/testing.md's copy of it and what `.ci/run` runs are one command."""

from __future__ import annotations

import re
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def _test_command(text: str) -> str:
    """The `ruff check . && pytest ...` part of a file's test command (the one line that has it)."""
    [line] = [line for line in text.splitlines() if "ruff check . && pytest" in line and not line.startswith("#")]
    return re.search(r"ruff check \. && pytest.*$", line).group(0).strip()


def test_readme_docs_and_ci_run_the_same_test_command() -> None:
    ci = _test_command((REPO / ".ci" / "run").read_text())
    assert ci == _test_command((REPO / "README.md").read_text())
    assert ci == _test_command((REPO / "docs" / "testing.md").read_text())
    # Four xdist workers with the lab's groups (tests/conftest.py's scheduler reads --dist loadgroup).
    assert "-n 4" in ci and "--dist loadgroup" in ci
