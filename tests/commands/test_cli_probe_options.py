"""Bad --mesh / --sizes / --ops / --expect: one line on stderr, exit 2, before any rank starts."""

from __future__ import annotations

import pytest

from tests.helpers.ranks import run_cli


@pytest.mark.parametrize(("args", "words"), [
    (["launch", "-n", "16", "--mesh", "pp2,tp3"], "product pp2xtp3 = 6 does not divide WORLD_SIZE 16"),
    (["launch", "-n", "4", "--mesh", "tp2,tp2"], "tp appears twice"),
    (["launch", "-n", "4", "--sizes", "1Q"], "is not a size"),
    (["launch", "-n", "4", "--ops", "allreduce"], "unknown op"),
    (["launch", "-n", "4", "--mesh", "pp2,tp2", "--expect", "ep=1GB/s"], "no mesh dimension 'ep'"),
    (["launch", "-n", "4", "--expect", "gemm=fast"], "is not a compute rate"),
])
def test_bad_probe_options_exit_2_with_one_line(args: list[str], words: str) -> None:
    proc = run_cli(args, timeout=60)
    assert proc.returncode == 2
    assert words in proc.stderr and len(proc.stderr.strip().splitlines()) == 1 and "Traceback" not in proc.stderr


def test_a_rank_checks_the_mesh_against_its_launchers_world_size() -> None:
    proc = run_cli(["run", "--mesh", "pp2,tp3"], env={"RANK": "0", "WORLD_SIZE": "16"}, timeout=60)
    assert proc.returncode == 2 and "does not divide WORLD_SIZE 16" in proc.stderr
