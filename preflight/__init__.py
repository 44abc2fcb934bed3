"""preflight: validate a distributed PyTorch job from inside its own launcher, before it starts.

Two front doors: the `preflight` command (`srun preflight --mesh pp2,tp4`, commands/cli.py)
and, inside a training script, `preflight.check(mesh)` (api.py), loaded on first use so the
command does not pay for it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from preflight.api import PreflightFailed, PreflightWarning, check

__version__ = "0.1.0"
__all__ = ["PreflightFailed", "PreflightWarning", "check"]


def __getattr__(name: str) -> Any:
    """preflight.check, preflight.PreflightFailed and preflight.PreflightWarning, from preflight.api on first use."""
    if name in __all__:
        import random

        from preflight.lib.collector import collector_paused

        # The first use imports the runner, and with it rich, whose import draws from Python's global
        # random generator: the trainer's random state is its own (lib/process_state.py keeps the rest).
        state = random.getstate()
        try:
            with collector_paused():  # no full collection of the trainer's heap for preflight's import
                from preflight import api
        finally:
            random.setstate(state)
        return getattr(api, name)
    raise AttributeError(f"module 'preflight' has no attribute {name!r}")
