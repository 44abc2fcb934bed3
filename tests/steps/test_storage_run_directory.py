"""Rank 0's run directory under PATH is never left behind, even when its nonce file cannot be written."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from preflight.steps.storage import RunDirectory
from tests.helpers.tools import require_root, require_tool


def test_a_directory_whose_nonce_write_fails_is_removed(tmp_path: Path) -> None:
    """A filesystem with room for one more inode (tmpfs nr_inodes=2: its root and one entry): the mkdir
    succeeds, the nonce file's create fails with ENOSPC, and the directory made for it goes too."""
    require_root()
    mount = require_tool("mount")
    path = tmp_path / "ckpt"
    path.mkdir()
    subprocess.run([mount, "-t", "tmpfs", "-o", "size=1m,nr_inodes=2", "tmpfs", str(path)], check=True)
    try:
        run_dir = RunDirectory(str(path), "abc123")
        with pytest.raises(OSError):
            run_dir.make("abc123")
        assert list(path.iterdir()) == []
    finally:
        subprocess.run(["umount", str(path)], check=False)
