"""What argparse said badly, said plainly (issue 45, item 7): `--sizes -1M`, `preflight run -n 4`."""

from __future__ import annotations

import pytest

from preflight.commands.cli import main

NEGATIVE = [["run", "--sizes", "-1M"], ["--sizes", "-1M"], ["launch", "-n", "2", "--sizes", "-1M"]]


@pytest.mark.parametrize("argv", NEGATIVE)
def test_a_negative_size_is_one_clear_line(argv: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert err == "preflight: error: --sizes: '-1M' is negative: a size is positive (e.g. 1M, 64MiB, 4096)", err


@pytest.mark.parametrize("flag", ["-n", "--nproc-per-node"])
def test_run_with_n_suggests_launch(flag: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["run", flag, "4"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith(f"preflight: error: `preflight run` has no {flag}") and "`preflight launch -n N ...`" in err
