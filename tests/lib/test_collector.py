"""The garbage collector paused for preflight.check's import and call, preflight's own processes' torch import
frozen, and SQLAlchemy kept out of every run's import."""

from __future__ import annotations

import gc
import subprocess
import sys

import pytest

from preflight.lib.collector import collector_paused


@pytest.mark.parametrize("enabled", [True, False])
def test_paused_inside_and_as_it_was_after(enabled: bool) -> None:
    (gc.enable if enabled else gc.disable)()
    try:
        with collector_paused():
            assert not gc.isenabled()
        assert gc.isenabled() is enabled
        with pytest.raises(KeyError), collector_paused():
            raise KeyError("a failing block restores it too")
        assert gc.isenabled() is enabled
    finally:
        gc.enable()


IMPORT_CHECK = """
import gc, sys
import torch.distributed  # a trainer's heap first
import preflight  # the package alone: preflight.check loads preflight.api


class Watch:  # sees each module being imported, and whether the collector may run meanwhile
    seen = {}

    def find_spec(self, name, path=None, target=None):
        if name.startswith("preflight.") or name.split(".")[0] in ("sqlalchemy", "jinja2", "rich"):
            self.seen[name] = gc.isenabled()
        return None


sys.meta_path.insert(0, Watch())
preflight.check
before_pause = ("preflight.lib", "preflight.lib.collector")  # the pause itself
enabled = sorted(name for name, on in Watch.seen.items() if on and name not in before_pause)
print("api" if "preflight.api" in Watch.seen else "no-api", len(Watch.seen) > 20, enabled, gc.isenabled(),
      "sqlalchemy" in sys.modules, flush=True)
"""


def test_preflight_check_imports_with_the_collector_paused_and_without_sqlalchemy() -> None:
    """Every module preflight.check's first use imports is imported with the collector paused, and it is on after."""
    done = subprocess.run([sys.executable, "-c", IMPORT_CHECK], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["api", "True", "[]", "True", "False"]


def test_a_run_imports_no_sqlalchemy_without_history() -> None:
    done = subprocess.run([sys.executable, "-c", "import sys, preflight.runner, preflight.commands.cli, "
                           "preflight.commands.launch; print('sqlalchemy' in sys.modules)"],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0 and done.stdout.strip() == "False", done.stdout + done.stderr


# The collections seen while preflight's own process imports torch, then the collector's state after.
OWN_IMPORT = """
import gc, sys
full = []
gc.callbacks.append(lambda phase, info: full.append(1) if phase == "start" and info["generation"] == 2 else None)
if sys.argv[1] == "run":  # `preflight run` (srun, torchrun, mpirun, launch --start-method exec)
    from preflight.lib.torch_import import import_torch_distributed
    import_torch_distributed()
else:  # what `preflight launch`'s forkserver imports, in its order, before it forks the ranks
    from preflight.commands.launch import WORKER_PRELOAD
    for name in WORKER_PRELOAD:
        __import__(name)
print(len(full), gc.get_freeze_count() > 10_000, gc.isenabled(), "torch.distributed" in sys.modules, flush=True)
"""


@pytest.mark.parametrize("process", ["run", "forkserver"])
def test_own_processes_import_torch_without_collecting_then_freeze_it(process: str) -> None:
    """No full collection during preflight's own torch import (one cost 0.1 CPU-s; lib/collector.py), the
    import frozen out of the collector's generations after it, and the collector on again."""
    done = subprocess.run([sys.executable, "-c", OWN_IMPORT, process], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["0", "True", "True", "True"]
