"""The first module `preflight launch`'s forkserver imports (launch.WORKER_PRELOAD), and only it.

A Ctrl-C reaches the launch's whole process group, the forkserver included. Python's forkserver
ignores SIGINT only once its preload is imported (torch: seconds), so a Ctrl-C during it printed
a KeyboardInterrupt traceback; here it is ignored from the start, as the forkserver means to
(before this module, the launch keeps SIGINT blocked in it)
(a worker forked from it installs preflight's own handlers as its run starts, commands/cli.py).

A worker the agent was starting as the launch stopped cannot read its start-up data (the
launcher already removed the semaphores it names: multiprocessing's SemLock FileNotFoundError).
The forkserver reports that through sys.excepthook: one line here, not a traceback.

No cyclic collection while the preload imports torch and preflight (lib/collector.py,
`imports_frozen`): forkserver_warm, the preload's last module, freezes what it loaded and turns
the collector back on, so the ranks forked from here collect only what they allocate themselves.

And once the launch is gone, the forkserver leaves at once: its interpreter's shutdown with torch
loaded took 1.5 s more on a loaded node (its forked ranks leave by os._exit and never run this).
"""

from __future__ import annotations

import atexit
import gc
import os
import signal
import sys
from types import TracebackType


def _one_line(kind: type[BaseException], exc: BaseException, tb: TracebackType | None) -> None:
    print(f"preflight launch: a rank could not start ({kind.__name__}: {exc}); the launch was stopping",
          file=sys.stderr)


gc.disable()  # until forkserver_warm has imported the rest
signal.signal(signal.SIGINT, signal.SIG_IGN)
# The launch started this interpreter with SIGINT / SIGTERM blocked (so that its own start-up could
# not be cut short: lib/interrupts.children_start_with_signals_held). SIGINT is ignored: unblocked.
# SIGTERM stays blocked here for good: scancel's SIGTERM to the whole step used to end the forkserver
# first, and the agent then read every worker it had forked as exited (their exit statuses come
# through the forkserver) while rank 0 was still writing its partial report: the launcher removed its
# folder under it. Blocked, not ignored: a worker forked from here keeps the mask, and a SIGTERM sent
# before it unblocks it (launch.run_worker, first thing) waits and then ends it, never lost.
signal.pthread_sigmask(signal.SIG_UNBLOCK, (signal.SIGINT,))
sys.excepthook = _one_line
atexit.register(os._exit, 0)  # the first exit handler the forkserver runs: nothing after it is needed
