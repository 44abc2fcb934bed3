"""A real slow disk for one fake host: a loop-device filesystem and a cgroup v1 blkio throttle on it.

    with loop_filesystem(tmp_path, "64m") as fs:           # ext4 on /dev/loopN, mounted at fs.mount
        with blkio_throttle(fs.device, bps=2 * 2**20) as group:
            host.cgroup = group                          # every process of that host joins it

The throttle is the kernel's (blk-throttle, `blkio.throttle.{read,write}_bps_device` on the loop
device's major:minor): reads that reach the device, and the writes an fsync submits from the
process, are held to `bps`; other processes on the same filesystem run at the device's speed. This
machine has cgroup v1 (hybrid) and no device-mapper (no dm-delay), so cgroup v2's io.max is not
there; this is the mechanism that is (docs/testing.md). Needs root, losetup, mkfs.ext4.
"""

from __future__ import annotations

import os
import subprocess
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from tests.helpers.tools import require, require_root, require_tool

BLKIO = Path("/sys/fs/cgroup/blkio")


@dataclass(frozen=True)
class LoopFilesystem:
    """An ext4 filesystem on a loop device, mounted at `mount`."""

    device: str  # /dev/loopN
    mount: Path


def _run(*argv: str) -> str:
    return subprocess.run(argv, check=True, capture_output=True, text=True, timeout=60).stdout.strip()


@contextmanager
def loop_filesystem(folder: Path, size: str = "64m") -> Iterator[LoopFilesystem]:
    """A fresh ext4 of `size` on a loop device, mounted under `folder`; all undone afterwards."""
    require_root()
    for tool, package in (("losetup", "mount"), ("mkfs.ext4", "e2fsprogs")):
        require_tool(tool, package)
    image, mount = folder / "disk.img", folder / "disk"
    _run("truncate", "-s", size, str(image))
    _run("mkfs.ext4", "-q", "-F", str(image))
    mount.mkdir()
    device = _run("losetup", "--find", "--show", str(image))
    try:
        _run("mount", device, str(mount))
        try:
            yield LoopFilesystem(device, mount)
        finally:
            subprocess.run(["umount", str(mount)], check=False, capture_output=True, timeout=60)
    finally:
        subprocess.run(["losetup", "-d", device], check=False, capture_output=True, timeout=60)


@contextmanager
def blkio_throttle(device: str, bps: int) -> Iterator[Path]:
    """A new blkio cgroup that holds reads and writes on `device` to `bps` bytes/s; removed afterwards
    (the processes in it must have exited)."""
    require_root()
    require((BLKIO / "blkio.throttle.write_bps_device").exists(),
            "no cgroup v1 blkio controller with throttling at /sys/fs/cgroup/blkio (CONFIG_BLK_DEV_THROTTLING)")
    rdev = os.stat(device).st_rdev
    numbers = f"{os.major(rdev)}:{os.minor(rdev)}"
    group = Path(tempfile.mkdtemp(prefix="pfslow", dir=BLKIO))
    try:
        for name in ("blkio.throttle.write_bps_device", "blkio.throttle.read_bps_device"):
            (group / name).write_text(f"{numbers} {bps}\n")
        yield group
    finally:
        for proc in (group / "cgroup.procs").read_text().split():  # anything left: back to the root group
            try:
                (BLKIO / "cgroup.procs").write_text(proc)
            except OSError:
                pass
        try:
            group.rmdir()
        except OSError:
            pass
