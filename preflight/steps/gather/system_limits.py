"""Process and host limits: CPU count, locked-memory limit, /dev/shm size."""

from __future__ import annotations

import os
import resource
from typing import TYPE_CHECKING

from preflight.model import RankFacts

if TYPE_CHECKING:
    from preflight.steps.gather import GatherOptions


def gather(facts: RankFacts, options: GatherOptions) -> None:
    """Fill facts.system with pid, cpu count, RLIMIT_MEMLOCK and /dev/shm size."""
    soft, _hard = resource.getrlimit(resource.RLIMIT_MEMLOCK)
    facts.system.pid = os.getpid()
    facts.system.cpu_count = os.cpu_count() or 0
    facts.system.memlock_bytes = -1 if soft == resource.RLIM_INFINITY else int(soft)
    try:
        stat = os.statvfs("/dev/shm")
        facts.system.shm_bytes = stat.f_frsize * stat.f_blocks
    except OSError:
        facts.system.shm_bytes = None
