"""The storage family's options (`--storage PATH`, `--checkpoint-size`, `--storage-budget`), validated where built.

`StorageOptions` is one field of RunOptions (preflight/options/values.py parses the text; this
dataclass checks itself, ParallelDims-style, where the data enters): PATH must be a directory
this rank can write into, else one line and exit 2 before the run (a path that goes away
mid-run is the family's could-not-run, steps/storage.py). Every rank checks its own view
of PATH: a rank whose PATH is missing stops there, naming itself.
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass
from typing import Any

from preflight.lib.errors import BadInput, BadOptionType
from preflight.lib.numbers import shown

# The default budget: the most one rank writes (and reads back) per pass. 16 MiB per rank is
# 128 MiB per 8-GPU host: under 0.2 s on one NVMe drive (~1 GB/s), about 1 s for a host on a
# 1 GB/s share of a parallel filesystem, and still large enough that the fsync, not a syscall,
# dominates the time (docs/performance.md has the family's wall time at this default).
DEFAULT_BUDGET = 16 * 2**20
MIN_BUDGET = 64 * 2**10  # below this the time is the fsync's latency, not a rate
MAX_BUDGET = 2**34  # 16 GiB per rank and pass: the family is a check, not a benchmark
MAX_CHECKPOINT = 2**60  # 1 EiB: a larger checkpoint is a typo
# Headroom stated by the room check (STO004): a save keeps the previous checkpoint until the new
# one is complete, so the path needs room for two; below one it is an error, below two a warning.
HEADROOM = 2.0
PATH_ENV = "PREFLIGHT_STORAGE"
MAX_PATH_CHARS = 4096


@dataclass(frozen=True)
class StorageOptions:
    """What the storage family measures: the checkpoint path and how much one save writes.

    path: the checkpoint directory (absolute after validation); checkpoint_size: bytes one save
    writes in total over every rank (None: room and time are not judged against a size);
    budget: the most one rank writes per pass; expect_write / expect_read: GB/s per host from
    `--expect storage_write=...,storage_read=...` (None: judged against sibling hosts only).
    """

    path: str
    checkpoint_size: int | None = None
    budget: int = DEFAULT_BUDGET
    expect_write: float | None = None
    expect_read: float | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.path, (str, os.PathLike)):
            raise BadOptionType(f"storage (--storage) must be a path, not {type(self.path).__name__}")
        path = os.fspath(self.path)
        if not isinstance(path, str):
            raise BadOptionType("storage (--storage) must be a text path, not bytes")
        object.__setattr__(self, "path", check_directory(path))
        for name, maximum in (("checkpoint_size", MAX_CHECKPOINT), ("budget", MAX_BUDGET)):
            value = getattr(self, name)
            if value is None and name == "checkpoint_size":
                continue
            if isinstance(value, bool) or not isinstance(value, int):
                raise BadOptionType(f"{name} must be a whole number of bytes, not {type(value).__name__}")
            low = MIN_BUDGET if name == "budget" else 1
            if not low <= value <= maximum:
                raise BadInput(f"{name}={value}: must be {low} to {maximum} bytes")
        for name in ("expect_write", "expect_read"):
            value = getattr(self, name)
            if value is not None and (isinstance(value, bool) or not isinstance(value, (int, float))
                                      or not math.isfinite(value) or value <= 0):
                raise BadInput(f"--expect storage_{name[7:]}: must be a positive rate")

    def share(self, world_size: int) -> int:
        """Bytes one rank writes per pass: its share of one checkpoint, capped by the budget."""
        if self.checkpoint_size is None:
            return self.budget
        return max(MIN_BUDGET, min(self.budget, -(-self.checkpoint_size // max(1, world_size))))


def check_directory(path: str) -> str:
    """`path` as an absolute path when it is a directory this process can create files in; else BadInput."""
    if not path or len(path) > MAX_PATH_CHARS or "\0" in path:
        raise BadInput(f"--storage {shown(path)}: not a usable path")
    absolute = os.path.abspath(path)
    if not os.path.exists(absolute):
        raise BadInput(f"--storage {shown(path)}: no such directory on this host")
    if not os.path.isdir(absolute):
        raise BadInput(f"--storage {shown(path)}: is a file, not a directory")
    if not os.access(absolute, os.W_OK | os.X_OK):
        raise BadInput(f"--storage {shown(path)}: this user cannot write there (read-only, or its permissions)")
    return absolute


def storage_path(given: Any) -> Any:
    """--storage / `storage=` when given, else $PREFLIGHT_STORAGE, else None (no storage family)."""
    if given is not None:
        return given
    return os.environ.get(PATH_ENV) or None
