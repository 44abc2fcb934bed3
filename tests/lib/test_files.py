"""preflight/lib/files.py: the one atomic write (reports, rank files, `preflight history` outputs)."""

from __future__ import annotations

from pathlib import Path

import pytest

from preflight.lib.files import atomic_write, replacing


def test_atomic_write_replaces_the_file_and_leaves_nothing_beside_it(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)
    target = tmp_path / "new" / "hosts.txt"
    atomic_write(target, "a\n")
    atomic_write(target, b"b\n")
    assert target.read_text() == "b\n"
    assert [p.name for p in target.parent.iterdir()] == ["hosts.txt"]


def test_a_write_that_fails_midway_keeps_the_previous_file(tmp_path: Path) -> None:
    target = tmp_path / "hosts.txt"
    target.write_text("previous\n")
    with pytest.raises(KeyboardInterrupt), replacing(target) as partial:
        partial.write_text("half")
        raise KeyboardInterrupt  # a signal in the middle of the write
    assert target.read_text() == "previous\n"
    assert [p.name for p in tmp_path.iterdir()] == ["hosts.txt"]


def test_missing_folders_are_created_inside_the_current_tree_only(tmp_path: Path, monkeypatch) -> None:
    """The one rule for every writer: `out/r.json` gets its folder; `/elsewhere/missing/r.json` is an
    error and nothing is created there (a typo, an unmounted /scratch)."""
    here, elsewhere = tmp_path / "here", tmp_path / "elsewhere"
    here.mkdir()
    elsewhere.mkdir()
    monkeypatch.chdir(here)
    atomic_write(Path("out/deeper/r.json"), "x")
    assert (here / "out" / "deeper" / "r.json").read_text() == "x"
    with pytest.raises(FileNotFoundError, match="only inside the current directory"):
        atomic_write(elsewhere / "missing" / "r.json", "x")
    assert list(elsewhere.iterdir()) == []
    atomic_write(elsewhere / "r.json", "y")  # an existing folder anywhere is fine
    assert (elsewhere / "r.json").read_text() == "y"
