"""Files written whole: a reader (a scheduler, node_exporter, `preflight report`, rank 0 reading a
rank's file) never sees half of one, and a writer killed midway leaves the previous file in place.

The one way preflight replaces a file: write a temporary file beside the target (same folder,
so the rename stays on one filesystem and is atomic), then `os.replace` it over the target.
And the one rule for missing folders (`ensure_parent`): created inside the current directory's
tree only.
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
    ensure_parent(target)
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


def inside_tree(folder: Path) -> bool:
    """Whether `folder` lies in the current directory's tree, where missing folders may be created."""
    here = Path.cwd().resolve()
    target = (here / folder).resolve()
    return target == here or here in target.parents


def ensure_parent(path: Path) -> None:
    """Create `path`'s missing folders, only inside the current directory's tree (else OSError).

    Why this rule: a relative path (`out/r.json`) is the common case and creating its
    folders saves a step; a missing folder elsewhere is most often a typo or a filesystem that is
    not mounted (`/scratch/...` on a node without it), and creating it would hide that.
    """
    folder = path.parent
    if folder.is_dir():
        return
    if not inside_tree(folder):
        raise FileNotFoundError(f"folder {folder} does not exist (preflight creates missing folders only "
                                "inside the current directory; create it first)")
    folder.mkdir(parents=True, exist_ok=True)
