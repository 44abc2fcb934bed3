"""preflight/lib/torch_import.py: the C++ log level is the user's after import, FATAL only inside quiet_cpp_logs()."""

from __future__ import annotations

import subprocess
import sys
import textwrap

from tests.helpers.ranks import base_env

SCRIPT = textwrap.dedent("""
    import sys
    from datetime import timedelta
    from preflight.lib.torch_import import cpp_log_level, import_torch_distributed, quiet_cpp_logs
    import_torch_distributed()
    import torch.distributed as dist
    print("after-import", cpp_log_level())
    def connect():
        try:
            dist.TCPStore("127.0.0.1", 1, 2, False, timeout=timedelta(seconds=0.5))
        except Exception:
            pass
    with quiet_cpp_logs():
        print("inside", cpp_log_level())
        sys.stderr.write("--quiet--\\n")
        connect()
        sys.stderr.write("--end quiet--\\n")
    print("after", cpp_log_level())
    connect()
""")


def test_cpp_log_level_stays_the_users_and_is_fatal_only_inside_the_quiet_block() -> None:
    proc = subprocess.run([sys.executable, "-c", SCRIPT], env=base_env(), capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split() == ["after-import", "1", "inside", "3", "after", "1"]  # WARNING, FATAL, WARNING
    quiet = proc.stderr.split("--quiet--")[1].split("--end quiet--")[0]
    assert "c10d" not in quiet  # the retried connection's stack traces are silenced
    assert "c10d" in proc.stderr.split("--end quiet--")[1]  # and torch's messages are back afterwards


def test_a_users_level_is_kept() -> None:
    code = ("from preflight.lib.torch_import import cpp_log_level, import_torch_distributed as i; "
            "i(); print(cpp_log_level())")
    proc = subprocess.run([sys.executable, "-c", code], env=base_env({"TORCH_CPP_LOG_LEVEL": "INFO"}),
                          capture_output=True, text=True, timeout=120)
    assert proc.stdout.split()[-1] == "0", proc.stderr
