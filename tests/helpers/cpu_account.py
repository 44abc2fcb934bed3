"""CPU seconds of one pytest worker and every process it starts, for the suite's timeline.

Why: the suite on two cores is bound by CPU, and a test's wall time says little about the CPU it
costs (most of a launcher test is waiting). A worker joins a cgroup v1 `cpuacct` group of its own
(root only); its children inherit it, so the group's usage counts the ranks, launchers and tools a
test starts, even those orphaned before they exit. Slurm's tasks run under slurmd and are not
counted. Where no such controller is writable, the figure is None. The worker leaves its group as
it exits and removes it; one that still held a process then (an anchor or a zygote the worker's own
exit hooks end after this one) is removed by the next worker that joins, once empty.
"""

from __future__ import annotations

import atexit
import os
from pathlib import Path

CPUACCT = Path("/sys/fs/cgroup/cpuacct")
_group: Path | None = None
_tried = False


def worker_cpu_s(name: str) -> float | None:
    """Cumulative CPU seconds of this worker's cgroup (joined on the first call); None without one."""
    global _group, _tried
    if not _tried:
        _tried = True
        group = CPUACCT / "preflight-tests" / f"{name}-{os.getpid()}"
        try:
            _remove_left_behind(group.parent)
            group.mkdir(parents=True, exist_ok=True)
            (group / "cgroup.procs").write_text(str(os.getpid()))
        except OSError:
            return None
        _group = group
        atexit.register(_leave)
    if _group is None:
        return None
    return int((_group / "cpuacct.usage").read_text()) / 1e9


def _leave() -> None:
    """Back to the root group, and this worker's own removed when nothing else is left in it."""
    if _group is None:
        return
    try:
        (CPUACCT / "cgroup.procs").write_text(str(os.getpid()))
        _group.rmdir()
    except OSError:
        pass


def _remove_left_behind(parent: Path) -> None:
    """Earlier workers' groups that are empty now (one with a live process in it refuses rmdir: kept)."""
    for old in parent.glob("*-*") if parent.is_dir() else ():
        try:
            old.rmdir()
        except OSError:
            pass
