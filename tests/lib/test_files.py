"""preflight/lib/files.py: the one atomic write (reports, rank files, `preflight history` outputs)."""

from __future__ import annotations

from pathlib import Path

import pytest

from preflight.lib.files import atomic_write, replacing


def test_atomic_write_replaces_the_file_and_leaves_nothing_beside_it(tmp_path: Path) -> None:
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
