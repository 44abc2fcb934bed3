"""Give local ranks distinct host names, so a one-machine run looks like a multi-host job.

A FAKE, documented where used: a `sitecustomize.py` on PYTHONPATH replaces
`socket.gethostname` in each rank's interpreter with a name derived from its rank. The
ranks, the store and every check are real; only the name they report for their host is not.
"""

from __future__ import annotations

import os
from pathlib import Path


def fake_hostnames_env(tmp_path: Path, pattern: str = "node{rank:02d}", per_host: int = 1) -> dict[str, str]:
    """Env for every rank: host name = pattern.format(rank=RANK // per_host + 1)."""
    folder = tmp_path / "fake-hostnames"
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "sitecustomize.py").write_text(
        "import os, socket\n"
        "_rank = os.environ.get('RANK') or os.environ.get('LOCAL_RANK')\n"
        "if _rank is not None:\n"
        f"    _name = {pattern!r}.format(rank=int(_rank) // {per_host} + 1)\n"
        "    socket.gethostname = lambda: _name\n"
    )
    existing = os.environ.get("PYTHONPATH", "")
    return {"PYTHONPATH": f"{folder}{os.pathsep}{existing}" if existing else str(folder)}
