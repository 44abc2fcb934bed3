"""The storage family's files on a real filesystem: rank 0's run directory is never left behind, even when
its nonce file cannot be written; a read-back gets past the caches it can (O_DIRECT where the filesystem
takes it) and says how."""

from __future__ import annotations

import hashlib
import os
import subprocess
from pathlib import Path

import pytest

from preflight.model.storage import StorageSection
from preflight.reports import storage_table
from preflight.steps.storage import DIRECT, DROPPED, RunDirectory, read_back
from preflight.steps.storage_judge import _read_back_text
from tests.helpers.slow_disk import loop_filesystem
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


def _written(folder: Path, nbytes: int = 3 * 2**20 + 123) -> tuple[Path, str]:
    data = os.urandom(nbytes)
    path = folder / "share"
    path.write_bytes(data)
    return path, hashlib.sha256(data).hexdigest()


def test_a_read_back_on_ext4_bypasses_the_page_cache_with_o_direct(tmp_path: Path) -> None:
    """A real ext4 (loop device) takes O_DIRECT: the read says so, and reads every byte right."""
    with loop_filesystem(tmp_path, "32m") as fs:
        path, digest = _written(fs.mount)
        read = read_back(str(path), 1, 0)
    assert (read.error, read.method, read.nbytes, read.digest) == ("", DIRECT, 3 * 2**20 + 123, digest)


def test_a_filesystem_that_refuses_o_direct_is_read_buffered_with_the_cache_dropped(tmp_path: Path) -> None:
    """ramfs refuses O_DIRECT (EINVAL at open; tmpfs takes it since Linux 6.6): the read falls back, and says
    which it used."""
    require_root()
    mount = tmp_path / "ramfs"
    mount.mkdir()
    subprocess.run([require_tool("mount"), "-t", "ramfs", "ramfs", str(mount)], check=True)
    try:
        path, digest = _written(mount)
        read = read_back(str(path), 1, 0)
    finally:
        subprocess.run(["umount", str(mount)], check=False)
    assert (read.error, read.method, read.digest) == ("", DROPPED, digest)


def test_the_report_says_how_the_read_back_got_past_caches() -> None:
    section = StorageSection(path="/ckpt", share_bytes=2**20, passes=1, seconds=1.0,
                             read_back=_read_back_text({DIRECT}, {True}))
    assert "read back O_DIRECT; each rank read a file another host wrote" in storage_table.summary(section)
    assert "a cache shared on the host may answer" in _read_back_text({DROPPED}, {False})
