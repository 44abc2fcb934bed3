"""The garbage collector paused for preflight.check's import and call, and SQLAlchemy kept out of every run's import."""

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
