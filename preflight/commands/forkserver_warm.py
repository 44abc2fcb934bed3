"""What every rank of `preflight launch` would otherwise load after its fork, loaded once in the forkserver.

The last module of launch.WORKER_PRELOAD. Without it each of N ranks imported the checks,
the probes, the renderers (jinja2), psutil and detect-secrets' plugins, and compiled
detect-secrets' patterns on its own, after its fork: ~0.1 s of CPU per rank, N times over on a
node's cores, before the verdict (the plugins' `requests` is not imported at all: lib/secrets.py).
Here it is paid once, while the launcher itself is still importing torch (launch starts the
forkserver first).
"""

from __future__ import annotations

import gc

import psutil  # noqa: F401  (the clock and process facts)

from preflight.lib import secrets
from preflight.probes import collect, confirm, grouptest, hosttest, pairwise, session, steps  # noqa: F401
from preflight.registry import load_builtin_checks
from preflight.reports import exclude, html, junit  # noqa: F401

load_builtin_checks()
secrets.is_secret_value("")  # compiles detect-secrets' token patterns (cached for the process's life)
# The preload is in, imported with the collector off (forkserver_setup): out of its generations for good,
# and collected from here on as in any process (lib/collector.py, `imports_frozen`).
gc.freeze()
gc.enable()
