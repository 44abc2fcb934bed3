"""A report file is whole or absent: never half written where a reader expects one."""

from __future__ import annotations

from pathlib import Path

import pytest

from preflight.model import JobReport, ReportMeta
from preflight.reports import _write_whole


def report() -> JobReport:
    return JobReport(meta=ReportMeta("env", "", "r", 1, 1, "127.0.0.1", 1))


def test_a_writer_that_dies_midway_leaves_the_previous_file_and_no_partial(tmp_path: Path) -> None:
    target = tmp_path / "r.json"
    target.write_text("the previous run's report\n")

    def dies_midway(_: JobReport, path: str) -> None:
        Path(path).write_text('{"meta": {"launch')
        raise KeyboardInterrupt  # a launcher's signal in the middle of the write

    with pytest.raises(KeyboardInterrupt):
        _write_whole(dies_midway, report(), str(target))
    assert target.read_text() == "the previous run's report\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["r.json"]


def test_a_finished_write_replaces_the_target(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)  # a missing folder is created inside the current directory only
    target = tmp_path / "deeper" / "r.txt"
    _write_whole(lambda _, path: Path(path).write_text("whole\n"), report(), str(target))
    assert target.read_text() == "whole\n" and sorted(p.name for p in target.parent.iterdir()) == ["r.txt"]
