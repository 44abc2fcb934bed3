"""Files written whole: a reader (a scheduler, node_exporter, `preflight report`, rank 0 reading a
rank's file) never sees half of one, and a writer killed midway leaves the previous file in place.

The one way preflight replaces a file: write a temporary file beside the target (same folder,
so the rename stays on one filesystem and is atomic), then `os.replace` it over the target.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path


@contextmanager
def replacing(path: str | Path) -> Iterator[Path]:
    """A temporary path beside `path` to write to; renamed over `path` when the block ends without
    an exception, removed either way (a launcher's signal midway leaves no partial file behind)."""
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    partial = target.with_name(f".{target.name}.{os.getpid()}.partial")
    try:
        yield partial
        os.replace(partial, target)
    finally:
        partial.unlink(missing_ok=True)


def atomic_write(path: str | Path, data: str | bytes) -> None:
    """Write `data` (text as UTF-8) to `path` whole (see `replacing`)."""
    with replacing(path) as partial:
        partial.write_bytes(data.encode() if isinstance(data, str) else data)
