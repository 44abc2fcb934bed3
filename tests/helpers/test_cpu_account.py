"""The timeline's per-test CPU counts the processes a test starts, not only the worker's own."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

from tests.helpers import cpu_account
from tests.helpers.tools import require, require_root

# In a process of its own: joining moves the caller into the group until it exits.
_MEASURE = textwrap.dedent("""
    import os, subprocess, sys
    from tests.helpers.cpu_account import worker_cpu_s
    before = worker_cpu_s("test")
    subprocess.run([sys.executable, "-c", "import time\\nend = time.process_time() + 0.5\\n"
                    "while time.process_time() < end: pass"], check=True)
    print(before, worker_cpu_s("test"), os.getpid())
""")


def test_a_child_process_cpu_is_counted_and_the_group_is_removed_after() -> None:
    require_root()
    require(os.access(cpu_account.CPUACCT, os.W_OK), f"no writable cgroup v1 cpuacct at {cpu_account.CPUACCT}")
    done = subprocess.run([sys.executable, "-c", _MEASURE], capture_output=True, text=True, check=True,
                          cwd=Path(__file__).parents[2])
    before, after, pid = done.stdout.split()
    assert float(after) - float(before) >= 0.45  # the child's 0.5 s of CPU, counted though it is not the worker
    assert not (cpu_account.CPUACCT / "preflight-tests" / f"test-{pid}").exists()  # left and removed at exit
