"""Importing torch.distributed without leaving torch's C++ log level at FATAL for the whole run.

c10 reads TORCH_CPP_LOG_LEVEL once, when torch is imported, into the global
FLAGS_caffe2_log_level; setting the variable only around the import therefore keeps the level
at FATAL for the rest of the process and hides NCCL's watchdog messages when a rank dies.
Instead torch is imported with the user's level, and quiet_cpp_logs() raises the level to
FATAL only around the code whose C++ noise preflight reports itself in one line (a c10d store
connection retried with a stack trace per attempt), restoring it afterwards. The flag is
reached through libc10's exported symbol; where it cannot be (another build), nothing is
silenced: noise, never hidden messages.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import sys
from collections.abc import Iterator
from typing import Any

from preflight.lib.collector import imports_frozen
from preflight.lib.interrupts import interrupts_end_at_once

FATAL = 3  # c10's levels: 0 INFO, 1 WARNING, 2 ERROR, 3 FATAL


def import_torch_distributed() -> None:
    """Import torch.distributed now (the slow import, outside any gatherer's deadline), at the user's log level.

    A SIGINT/SIGTERM during the import ends the process at once, one line and exit 4
    (lib/interrupts.interrupts_end_at_once): raised inside numpy's C initialisation, an interrupt
    left an ImportError traceback."""
    if "torch.distributed" in sys.modules:
        return  # inside a job (preflight.check), or a forked rank: nothing to wait for
    with interrupts_end_at_once("loading torch"), imports_frozen():  # preflight's own process (lib/collector.py)
        import torch.distributed  # noqa: F401


def _level_flag() -> Any:
    """libc10's FLAGS_caffe2_log_level as a ctypes int, or None where it cannot be found."""
    import torch

    path = os.path.join(os.path.dirname(torch.__file__), "lib", "libc10.so")
    try:
        return ctypes.c_int.in_dll(ctypes.CDLL(path), "FLAGS_caffe2_log_level")
    except (OSError, ValueError):
        return None


def cpp_log_level() -> int | None:
    """The C++ log level in force now (0-3), or None where it cannot be read."""
    flag = _level_flag()
    return None if flag is None else int(flag.value)


@contextlib.contextmanager
def quiet_cpp_logs() -> Iterator[None]:
    """Only FATAL C++ messages inside the block; the level from before it afterwards (also on an exception)."""
    import_torch_distributed()
    flag = _level_flag()
    if flag is None:
        yield
        return
    before = int(flag.value)
    flag.value = max(before, FATAL)
    try:
        yield
    finally:
        flag.value = before
