"""`preflight launch -n N [run options]`: N local ranks through torch's elastic launcher.

The CI smoke check. torch's own launcher (the engine behind torchrun) spawns the workers,
hosts the rendezvous store and forwards signals; we only pick the options and turn its
generic failure into the verdict's exit code. By default the workers fork from a forkserver
that imported torch once (the per-rank `import torch` was most of a CPU launch's time);
`--start-method exec` starts each as its own `preflight run` process, as torchrun does.
"""

from __future__ import annotations

import argparse
import functools
import logging
import multiprocessing
import multiprocessing.forkserver
import multiprocessing.resource_tracker
import multiprocessing.util
import os
import secrets
import shutil
import signal
import sys
import tempfile
import uuid
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from msgspec.structs import replace

from preflight.channel.run_auth import SECRET_VAR
from preflight.lib.collector import imports_frozen
from preflight.lib.errors import BadInput
from preflight.lib.interrupts import (
    also_at_once,
    children_start_with_signals_held,
    exit_at_once,
    interrupts_end_at_once,
)
from preflight.model import ExitCode
from preflight.options import RunOptions
from preflight.reports.targets import STDOUT, refuse_unwritable

# What the forkserver imports once for every worker (see launch).
# forkserver_setup first: it quiets a Ctrl-C that arrives while the rest loads.
WORKER_PRELOAD = ("preflight.commands.forkserver_setup", "torch", "torch.distributed", "preflight.commands.cli",
                  "preflight.runner", __name__, "preflight.commands.forkserver_warm")
# In the forkserver this is its environment at start; workers forked from it inherit the copy.
_ENV_AT_IMPORT = dict(os.environ)


def _launch_only_parser() -> argparse.ArgumentParser:
    """launch's own options alone, read with argparse's own rules (abbreviations, `-n4`, `--nproc=4`)."""
    parser = argparse.ArgumentParser(add_help=False)
    parser.add_argument("-n", "--nproc")
    parser.add_argument("--start-method")
    return parser


def _forwarded_args(argv: Sequence[str]) -> list[str]:
    """The run options as given, minus launch's own (-n/--nproc, --start-method).

    argparse already accepted launch's command line, abbreviations included (`--npr 4`,
    `--start exec`); the same parser rules take launch's own options out again, so an
    abbreviation never reaches `run`, which does not know it.
    """
    _, forwarded = _launch_only_parser().parse_known_args(list(argv))
    return forwarded


def launch(nproc: int, argv: Sequence[str], options: RunOptions, start_method: str = "forkserver") -> int:
    """Spawn nproc local ranks running `preflight run ...`; return rank 0's code.

    start_method "forkserver" forks the ranks from one process that imported torch once;
    "exec" starts each as a new `preflight run` process, as torchrun starts a training script.
    """
    if nproc < 1:
        raise BadInput(f"-n {nproc}: need at least one rank")
    options.for_world(nproc)  # a bad --mesh for -n: exit 2 once here, not once per rank
    refuse_unwritable(options.reports, options.out_dir, True, options.output_files())  # before any rank
    # 8 ranks x 2 OpenMP threads on 2 cores run 2x slower; torchrun sets 1 as well. Set before the
    # forkserver starts: its torch import reads it once, for every rank forked from it.
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    # A per-run secret every worker inherits (the agent passes its environment on): the store's
    # values are then proven to come from this run's ranks (channel/run_auth.py).
    os.environ.setdefault(SECRET_VAR, secrets.token_hex(16))
    if start_method != "exec":
        # Before this process imports torch: the forkserver's import of torch and preflight then
        # runs beside the launcher's own (two imports of ~2 CPU-s each, on two cores at once).
        # The resource tracker first, out of the block: CPython's resource tracker (which the
        # forkserver starts) unblocks SIGINT/SIGTERM in the calling thread once it runs, whatever was blocked.
        multiprocessing.resource_tracker.ensure_running()
        with children_start_with_signals_held():  # no Ctrl-C inside the forkserver's interpreter start-up
            start_forkserver()
    # Not cut torch's import in half (lib/torch_import.py); not collected during it (lib/collector.py).
    with interrupts_end_at_once("loading torch"), imports_frozen():
        from torch.distributed.elastic.multiprocessing import DefaultLogsSpecs
        from torch.distributed.elastic.multiprocessing.api import SignalException
        from torch.distributed.elastic.multiprocessing.errors import ChildFailedError
        from torch.distributed.launcher.api import LaunchConfig, elastic_launch

    args = _forwarded_args(argv)
    if options.probes.backend == "auto" and "--backend" not in " ".join(args):
        args += ["--backend", "gloo"]  # the CPU smoke check: gloo unless asked otherwise
    _quiet_torch_loggers()
    _cheap_rendezvous_event_names()
    with tempfile.TemporaryDirectory(prefix="preflight-launch-") as folder:
        config = LaunchConfig(
            min_nodes=1,
            max_nodes=1,
            nproc_per_node=nproc,
            run_id=f"preflight-{uuid.uuid4().hex[:12]}",
            rdzv_backend="c10d",
            rdzv_endpoint="localhost:0",
            max_restarts=0,
            monitor_interval=0.05,
            start_method="forkserver",  # used only with a function entrypoint (run_worker)
            # The agent's per-rank folders (each rank's error file) inside this launch's own folder,
            # removed with it: by default torch makes a /tmp/torchelastic_* folder per launch, never removed.
            logs_specs=DefaultLogsSpecs(log_dir=str(Path(folder, "elastic"))),
        )
        verdict_file = Path(folder, "verdict")
        # Rank 0's JSON, always: a rank that dies makes the agent stop the others, and the
        # report is then amended here (_name_the_dead).
        report_json = options.reports.json
        if report_json in (None, STDOUT):
            report_json = str(Path(folder, "report.json"))
            args += ["--json", report_json]  # argparse: the last --json given wins
        # A report asked for as `-` goes through a file here: this process writes it to stdout once the ranks
        # are done, amended if one died, never a second copy after rank 0's.
        held, holding = _hold_stdout(options.reports.stdout_flag(), report_json, Path(folder))
        args += holding
        try:
            run_args = ["run", *args, "--verdict-file", str(verdict_file)]
            with children_start_with_signals_held():  # no Ctrl-C inside a child's interpreter start-up
                if start_method == "exec":
                    program, *prefix = worker_command()
                    elastic_launch(config, program)(*prefix, *run_args)
                else:
                    elastic_launch(config, run_worker)(run_args, dict(os.environ), os.getcwd())
        except ChildFailedError as failed:
            dead = _dead_ranks(failed)
            if dead:
                return _name_the_dead(dead, Path(report_json), verdict_file, options, held)
            _hand_on(held)
            return _verdict(verdict_file, failed)
        except SignalException as stop:  # SIGTERM / SIGINT to the launcher (scancel, a time limit)
            # The agent stops the workers; rank 0 writes its partial report and verdict on the way.
            print(f"preflight launch: stopped by {signal.Signals(stop.sigval).name}", file=sys.stderr)
            stopped = _verdict_or(verdict_file, int(ExitCode.INCOMPLETE))
            _hand_on(held)
        else:
            _hand_on(held)
            return int(ExitCode.PASSED)
    # Stopped, the folder removed: out at once, not through an interpreter shutdown with torch
    # loaded (a second or more on a loaded node, after the ranks were already gone).
    exit_at_once(stopped)


def _quiet_torch_loggers() -> None:
    """Silence the agent's own lines: each non-zero worker exit logged as an error, "Terminating
    process ...", and "Received 2 death signal, shutting down workers" on Ctrl-C; the verdict (or
    our one "stopped by" line) says why. torch's get_logger gives each module's logger a level of
    its own, so every one under torch.distributed.elastic is set, not only the parent."""
    for name in ["torch.distributed.elastic", "torch.multiprocessing", *logging.root.manager.loggerDict]:
        if name.startswith(("torch.distributed.elastic", "torch.multiprocessing")):
            logging.getLogger(name).setLevel(logging.CRITICAL)


def _cheap_rendezvous_event_names() -> None:
    """Name torch's rendezvous events from one frame, not the whole stack with its source.

    torch's dynamic rendezvous names every event it records by its caller's function,
    read as `inspect.stack()[2].function`: each call walks every frame and reads its source
    file (findsource). A launch records about nine, ~1 CPU-s of the launcher's critical path
    on a loaded 2-core node (cProfile, docs/performance.md). sys._getframe gives the same
    name. Only where torch still has that helper, in this (the launcher's) process.
    """
    from torch.distributed.elastic.rendezvous import dynamic_rendezvous

    if not callable(getattr(dynamic_rendezvous, "get_method_name", None)):
        return

    def get_method_name(depth: int = 2) -> str:
        try:
            return sys._getframe(depth).f_code.co_name  # frame 0 is this function, as stack()[0] was
        except ValueError:  # a stack shallower than depth
            return "no_method_name"

    dynamic_rendezvous.get_method_name = get_method_name


def start_forkserver() -> None:
    """Start the process the workers fork from; it imports torch and preflight once, for all.

    `import torch` is ~1.9 CPU-seconds, paid once per launch instead of once per rank (8 ranks
    on 2 cores: 18 s -> 6 s for `launch -n 8 --mesh pp2,tp4`). Started from `/`: Python 3.11's
    forkserver runs with its working directory first on sys.path, where a user's own modules
    could shadow torch's or ours for every rank.
    """
    multiprocessing.get_context("forkserver").set_forkserver_preload(list(WORKER_PRELOAD))
    here, temp_base = os.getcwd(), tempfile.tempdir
    os.chdir("/")
    tempfile.tempdir = _socket_temp_base()  # where multiprocessing makes its folder for the socket
    try:
        multiprocessing.forkserver.ensure_running()
    finally:
        os.chdir(here)
        tempfile.tempdir = temp_base
    # Its socket's folder (pymp-*), which multiprocessing's exit handler removes: a launch stopped by a
    # signal leaves at once, without that handler, and one folder per cancelled job piled up in TMPDIR.
    also_at_once(functools.partial(shutil.rmtree, multiprocessing.util.get_temp_dir(), ignore_errors=True))


# Linux's sun_path holds 107 bytes and a NUL; the forkserver listens on
# {temporary folder}/pymp-XXXXXXXX/listener-XXXXXXXX, this many bytes past the folder.
_SOCKET_PATH_MAX = 107
_FORKSERVER_SOCKET_TAIL = len("/pymp-12345678/listener-12345678")
_SHORT_TEMP_FOLDERS = ("/tmp", "/var/tmp", "/dev/shm")


def _socket_temp_base() -> str:
    """The temporary folder for the forkserver's socket: TMPDIR's, or a short one where TMPDIR's is too long.

    A batch system's per-job TMPDIR (or pytest's) can be deep enough that the socket's path no longer
    fits an AF_UNIX address, and the forkserver would fail to bind. Only the socket's folder moves
    (multiprocessing removes it at exit); the ranks keep the user's TMPDIR.
    """
    base = tempfile.gettempdir()
    if len(os.fsencode(base)) + _FORKSERVER_SOCKET_TAIL <= _SOCKET_PATH_MAX:
        return base
    for folder in _SHORT_TEMP_FOLDERS:
        if os.path.isdir(folder) and os.access(folder, os.W_OK | os.X_OK):
            return folder
    raise BadInput(f"TMPDIR {base} is too long for the forkserver's socket and none of "
                   f"{', '.join(_SHORT_TEMP_FOLDERS)} is writable: set a shorter TMPDIR or use --start-method exec")


def run_worker(argv: list[str], launch_env: dict[str, str], launch_cwd: str) -> None:
    """One worker, forked from the forkserver: this launch's environment and folder, then `preflight run`.

    The forkserver keeps the environment it started with, which can be an earlier launch's in a
    process that launches twice (the API, tests); the agent's per-worker variables (RANK,
    MASTER_PORT, ...) were set on top of it just before this call. Keep those, take the rest
    from the launch.
    """
    signal.pthread_sigmask(signal.SIG_UNBLOCK, (signal.SIGTERM,))  # blocked in the forkserver (forkserver_setup)
    from preflight.commands.cli import main

    from_agent = {k: v for k, v in os.environ.items() if _ENV_AT_IMPORT.get(k) != v}
    os.environ.clear()
    os.environ.update(launch_env)
    os.environ.update(from_agent)
    os.chdir(launch_cwd)  # relative report paths are the user's
    code = main(argv)
    if code:
        sys.exit(code)  # multiprocessing turns it into the worker's exit code, which the agent reads


def worker_command() -> list[str]:
    """How exec'd workers start preflight: `python -m preflight` with this interpreter."""
    return [sys.executable, "-m", "preflight"]


def _verdict(verdict_file: Path, failed: Any) -> int:
    """Rank 0's code from the file it wrote, else the first failure's.

    Once one rank exits with the verdict, torch's agent stops the others, rank 0 included,
    so their own exit codes (signals, "interrupted") do not say what the verdict was.
    """
    code = failed.get_first_failure()[1].exitcode
    return _verdict_or(verdict_file, code if code in {int(c) for c in ExitCode} else int(ExitCode.INCOMPLETE))


def _verdict_or(verdict_file: Path, fallback: int) -> int:
    """Rank 0's code from the file it wrote; the fallback when it wrote none."""
    try:
        return int(verdict_file.read_text())
    except (OSError, ValueError):
        return fallback


def _dead_ranks(failed: Any) -> dict[int, str]:
    """The rank whose death made the agent stop the others: rank -> how it ended; {} when none died.

    The agent's first failure, when it is no preflight exit (0-4): a signal (SIGKILL from the
    OOM killer or a user, SIGSEGV) or another exit code (a crash). Ranks the agent stopped
    afterwards fail later and are not blamed; a rank that exited with a verdict's code did not die.
    """
    try:
        rank, first = failed.get_first_failure()
    except Exception:  # no failure recorded: nothing to name
        return {}
    code = int(first.exitcode)
    if code in {int(c) for c in ExitCode}:
        return {}
    if code < 0:
        try:
            how = f"killed by {signal.Signals(-code).name}"
        except ValueError:
            how = f"killed by signal {-code}"
    else:
        how = f"exited with code {code}"
    return {int(rank): f"{how} (pid {first.pid})"}


def _hold_stdout(flag: str | None, report_json: str, folder: Path) -> tuple[Path | None, list[str]]:
    """Where rank 0 writes the report asked for as `-` (flag), which this process then writes to stdout
    (_hand_on, or amended by _name_the_dead), and the run arguments that send it there; (None, []) when no
    report goes to stdout. Rank 0 is told that stdout is held (--stdout-held): its verdict goes to stderr,
    as under `preflight run --json -`."""
    if flag is None:
        return None, []
    if flag == "--json":  # rank 0's JSON is already a file of this folder (launch)
        return Path(report_json), ["--stdout-held"]
    held = folder / "stdout-report"
    return held, [flag, str(held), "--stdout-held"]  # argparse: the last one given wins over the user's `-`


def _hand_on(held: Path | None) -> None:
    """Rank 0's report for stdout, as it wrote it; nothing when it wrote none (stopped before its verdict)."""
    from preflight.reports import copy_to_stdout

    if held is not None and held.is_file():
        copy_to_stdout(held)


def _name_the_dead(dead: dict[int, str], report_json: Path, verdict_file: Path, options: RunOptions,
                   held: Path | None) -> int:
    """Say which rank died; amend rank 0's report files so they name it (RUN008), not the ranks stopped after it,
    and the report asked for as `-` (held for stdout) too."""
    from preflight.reports import json as json_report
    from preflight.reports import write_reports
    from preflight.steps.verdict import amend_for_dead

    for rank, how in sorted(dead.items()):
        print(f"preflight launch: rank {rank} died: {how}; the launcher then stopped the other ranks",
              file=sys.stderr)
    if not report_json.is_file():
        return int(ExitCode.FAILED)  # a dead rank fails the run, whatever rank 0 managed to write
    try:
        report = amend_for_dead(json_report.load(report_json), dead, strict=options.strict)
    except (OSError, ValueError, KeyError, TypeError) as exc:
        print(f"preflight launch: rank 0's report could not be amended: {type(exc).__name__}: {exc}", file=sys.stderr)
        _hand_on(held)
        return _verdict_or(verdict_file, int(ExitCode.FAILED))
    # The user's files, and the report asked for as `-` to stdout; rank 0 printed its verdict before the amendment.
    write_reports(report, replace(options.reports, quiet=True))
    print(f"preflight launch: verdict {report.verdict}: {report.why}", file=sys.stderr)
    return report.exit_code
