"""`python -m preflight` and the `preflight` script: the command line (commands/cli.py).

Interrupts first: a SIGINT / SIGTERM while Python is still loading preflight (up to a second or
two on a loaded node) ends the process with one line and exit 4, never a KeyboardInterrupt
traceback or a bare -15; the run installs its own handlers (lib/interrupts.py) once it starts.
"""

import os
import signal
import sys


def _closed_streams_on_devnull() -> None:
    """A standard stream this process started without (`preflight launch >&-`, a daemon that closed its
    descriptors) opened on /dev/null: Python left `sys.stdout` None and the report's print was a
    traceback, and the next file any process of the run opened would have taken descriptor 1 and
    received what was meant for the terminal."""
    for fd, name in ((0, "stdin"), (1, "stdout"), (2, "stderr")):
        try:
            os.fstat(fd)
        except OSError:
            null = os.open(os.devnull, os.O_RDWR)  # the lowest free descriptor: this one
            if null != fd:
                os.dup2(null, fd)
                os.close(null)
            os.set_inheritable(fd, True)  # os.open's are not: an exec'd child (the forkserver) must have it too
            setattr(sys, name, open(fd, "r" if fd == 0 else "w", closefd=False))


def _stopped_while_starting(signum: int, frame: object) -> None:
    os.write(2, f"preflight: stopped ({signal.Signals(signum).name}) before the run started; exit 4\n".encode())
    os._exit(4)  # ExitCode.INCOMPLETE, before the model can be imported


_closed_streams_on_devnull()
for _signum in (signal.SIGINT, signal.SIGTERM):
    signal.signal(_signum, _stopped_while_starting)
# `preflight launch` starts its ranks with both signals blocked, so that one sent while this
# interpreter was still starting waits for the handlers above (lib/interrupts.py).
signal.pthread_sigmask(signal.SIG_UNBLOCK, (signal.SIGINT, signal.SIGTERM))

from preflight.commands.cli import main  # noqa: E402  (after the handlers, on purpose)

if __name__ == "__main__":
    raise SystemExit(main())
