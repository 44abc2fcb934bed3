"""Which mount holds a path, from /proc/self/mountinfo (this process's mount namespace, as it sees it).

One line per mount (proc(5)): `id parent major:minor root mount-point mount-options
[optional fields...] - fs-type source super-options`; spaces, tabs, newlines and backslashes in
paths are octal escapes (`\\040`). The mount holding a path is the last listed mount whose
mount point is the path or one of its parents (a later mount over the same point hides the
earlier one). Used by the storage family (steps/storage.py) to say what PATH is on each host.
"""

from __future__ import annotations

import os
import re

from preflight.model.storage import MountView

MOUNTINFO = "/proc/self/mountinfo"
_ESCAPE = re.compile(r"\\([0-7]{3})")
# Options that make every write synchronous or every lookup go to the server: each save pays for them.
SLOW_OPTIONS = ("sync", "dirsync", "noac", "actimeo=0", "lookupcache=none", "lookupcache=neg")


def _unescape(text: str) -> str:
    return _ESCAPE.sub(lambda m: chr(int(m.group(1), 8)), text)


def parse_line(line: str) -> MountView | None:
    """One mountinfo line as a MountView; None when it is not one."""
    fields = line.split()
    if "-" not in fields[6:]:
        return None
    dash = fields.index("-", 6)
    if len(fields) < dash + 3 or dash < 6:
        return None
    options = set(fields[5].split(",")) | set(fields[dash + 3].split(",") if len(fields) > dash + 3 else [])
    return MountView(mount_point=_unescape(fields[4]), fs_type=fields[dash + 1], source=_unescape(fields[dash + 2]),
                     root=_unescape(fields[3]), options=sorted(o for o in options if o))


def mount_of(path: str, text: str | None = None) -> MountView:
    """The mount holding `path` (resolved through symlinks); `text` is mountinfo's content (default: this process's)."""
    if text is None:
        with open(MOUNTINFO, encoding="utf-8", errors="replace") as handle:
            text = handle.read(4 * 2**20)
    target = os.path.realpath(path)
    best: MountView | None = None
    for line in text.splitlines():
        view = parse_line(line)
        if view is None:
            continue
        point = view.mount_point.rstrip("/") or "/"
        if target == point or target.startswith(point + "/") or point == "/":
            if best is None or len(point) >= len(best.mount_point.rstrip("/") or "/"):
                best = view
    return best or MountView()


def slow_options(view: MountView) -> list[str]:
    """The options of `view` that cost every save (SLOW_OPTIONS), as written there."""
    return [o for o in view.options if o in SLOW_OPTIONS or o.startswith("actimeo=0")]
