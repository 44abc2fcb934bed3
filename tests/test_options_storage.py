"""The storage family's options: --storage PATH, PREFLIGHT_STORAGE, --checkpoint-size, --storage-budget,
--expect storage_*; a bad PATH is one line and exit 2 before any rank waits (lib/storage_options.py)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from preflight.lib.errors import BadInput, BadOptionType
from preflight.lib.storage_options import DEFAULT_BUDGET, MIN_BUDGET, StorageOptions
from preflight.options import RunOptions
from tests.helpers.hosts import require_namespaces
from tests.helpers.ranks import run_cli


def test_storage_options_come_out_typed(tmp_path: Path) -> None:
    options = RunOptions.build(storage=str(tmp_path), checkpoint_size="2G", storage_budget="8M",
                               expect="storage_write=2GB/s,storage_read=1600MB/s")
    assert options.storage == StorageOptions(str(tmp_path), checkpoint_size=2 * 2**30, budget=8 * 2**20,
                                             expect_write=2.0, expect_read=1.6)
    assert options.probes.expect == {} and options.device.expect == {}
    assert options.storage.share(world_size=4) == 8 * 2**20  # capped by the budget
    assert options.storage.share(world_size=1024) == 2 * 2**20  # 2 GiB / 1024 ranks
    assert RunOptions.build(storage=str(tmp_path)).storage.budget == DEFAULT_BUDGET  # type: ignore[union-attr]
    assert RunOptions.build(storage=str(tmp_path), checkpoint_size="1K").storage.share(8) == MIN_BUDGET  # type: ignore


@pytest.mark.parametrize(("path_of", "said"), [
    (lambda tmp: tmp / "absent", "no such directory on this host"),
    (lambda tmp: tmp / "file", "is a file, not a directory"),
])
def test_a_bad_path_is_one_line_and_exit_2(tmp_path: Path, path_of, said: str) -> None:
    (tmp_path / "file").write_text("x")
    path = path_of(tmp_path)
    with pytest.raises(BadInput, match=said):
        RunOptions.build(storage=str(path))
    done = run_cli(["run", "--storage", str(path)], env={"RANK": "0", "WORLD_SIZE": "1"}, timeout=60)
    assert done.returncode == 2
    [line] = done.stderr.strip().splitlines()
    assert line.startswith("preflight: error: --storage '") and line.endswith(f": {said}")


def test_an_unwritable_path_is_refused(tmp_path: Path) -> None:
    """A read-only mount (root ignores permission bits, not a read-only filesystem), in a mount namespace."""
    require_namespaces()
    (tmp_path / "ro").mkdir()
    script = (f"mount -t tmpfs -o size=1m,ro tmpfs {tmp_path / 'ro'} && "
              f"exec {sys.executable} -m preflight run --storage {tmp_path / 'ro'}")
    done = subprocess.run(["unshare", "--mount", "sh", "-c", script], capture_output=True, text=True, timeout=60,
                          env={"PATH": "/usr/sbin:/usr/bin:/sbin:/bin", "RANK": "0", "WORLD_SIZE": "1"})
    assert done.returncode == 2, done.stderr
    assert "this user cannot write there" in done.stderr and "Traceback" not in done.stderr


def test_the_environment_names_the_path_and_the_flags_need_one(tmp_path: Path) -> None:
    done = run_cli(["run", "--checkpoint-size", "1G"], env={"RANK": "0", "WORLD_SIZE": "1"}, timeout=60)
    assert done.returncode == 2 and "only with --storage PATH" in done.stderr
    done = run_cli(["run", "--checkpoint-size", "1G"], timeout=60,
                   env={"RANK": "0", "WORLD_SIZE": "1", "PREFLIGHT_STORAGE": str(tmp_path / "nope")})
    assert done.returncode == 2 and "no such directory on this host" in done.stderr


@pytest.mark.parametrize(("keywords", "error"), [
    ({"checkpoint_size": "lots"}, BadInput),
    ({"checkpoint_size": "2E"}, BadInput),
    ({"storage_budget": "1K"}, BadInput),  # below the smallest share that measures a rate
    ({"expect": "storage_write=fast"}, BadInput),
    ({"checkpoint_size": 5}, BadOptionType),
])
def test_bad_sizes_and_rates_are_refused(tmp_path: Path, keywords: dict, error: type) -> None:
    with pytest.raises(error):
        RunOptions.build(storage=str(tmp_path), **keywords)
