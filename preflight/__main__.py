"""`python -m preflight` and the `preflight` script: the command line (commands/cli.py).

Interrupts first: a SIGINT / SIGTERM while Python is still loading preflight (up to a second or
two on a loaded node) ends the process with one line and exit 4, never a KeyboardInterrupt
traceback or a bare -15; the run installs its own handlers (lib/interrupts.py) once it starts.
"""

import os
import signal


def _stopped_while_starting(signum: int, frame: object) -> None:
    os.write(2, f"preflight: stopped ({signal.Signals(signum).name}) before the run started; exit 4\n".encode())
    os._exit(4)  # ExitCode.INCOMPLETE, before the model can be imported


for _signum in (signal.SIGINT, signal.SIGTERM):
    signal.signal(_signum, _stopped_while_starting)
# `preflight launch` starts its ranks with both signals blocked, so that one sent while this
# interpreter was still starting waits for the handlers above (lib/interrupts.py).
signal.pthread_sigmask(signal.SIG_UNBLOCK, (signal.SIGINT, signal.SIGTERM))

from preflight.commands.cli import main  # noqa: E402  (after the handlers, on purpose)

if __name__ == "__main__":
    raise SystemExit(main())
