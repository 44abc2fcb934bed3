"""Command line: `preflight [run options]`, `launch`, `list`, `explain`, `report`, `history`, `hardware`, `nccl-log`.

Bad input anywhere (flags, env, mesh strings) ends in one line on stderr and exit code 2,
never a traceback.
"""

from __future__ import annotations

import argparse
import atexit
import difflib
import os
import sys
from collections.abc import Sequence
from typing import NoReturn

from preflight import __version__
from preflight.commands.argv import attach_dashed_values, refuse_launch_flags_on_run
from preflight.commands.run_flags import add_run_options, options_from_args, shown_argv
from preflight.lib.errors import BadInput, Interrupted
from preflight.lib.hostlist import MAX_HOSTS
from preflight.lib.interrupts import exit_at_once, ignore_interrupts, interrupts_raised, leave_now
from preflight.lib.numbers import ascii_int
from preflight.model import ExitCode
from preflight.options import OPTIONS
from preflight.options.kinds import FLAG

__all__ = ["add_run_options", "build_parser", "main", "options_from_args", "shown_argv"]

SUBCOMMANDS = ("run", "launch", "list", "explain", "report", "history", "hardware", "nccl-log")

EPILOG = """exit codes: 0 passed (warnings allowed), 1 warnings with --strict, 2 bad usage or input,
3 failed (errors, missing ranks), 4 incomplete (a check could not run, interrupted, or an
output asked for could not be written after the run: the headline starts NOT WRITTEN).
Every rank exits with rank 0's verdict, so `srun preflight` fails the job step on a bad verdict."""


MAX_LOCAL_RANKS = 4096  # launch -n


def _local_ranks(text: str) -> int:
    try:
        return ascii_int(text, "-n", minimum=1, maximum=MAX_LOCAL_RANKS)
    except BadInput as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


class OneLineParser(argparse.ArgumentParser):
    """argparse, except that a usage error is one line (what was wrong, where help is), not the
    whole usage block: `preflight launch: error: argument -n/--nproc: ... (preflight launch --help)`."""

    def error(self, message: str) -> NoReturn:
        """Print one line on stderr and exit 2."""
        self.exit(int(ExitCode.BAD_INPUT), f"{self.prog}: error: {message} (see `{self.prog} --help`)\n")


def _kept_hosts(text: str) -> int:
    try:
        return ascii_int(text, "--keep", minimum=1, maximum=MAX_HOSTS)
    except BadInput as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def build_parser() -> argparse.ArgumentParser:
    """The whole CLI."""
    parser = OneLineParser(
        prog="preflight",
        description="Validate a distributed PyTorch job from inside its own launcher, before it starts.\n"
        "Without a subcommand, `preflight [options]` is `preflight run [options]`.\n\n"
        "The run options (--mesh, --sizes, --ops, --expect, --json, --html, --junit, --strict,\n"
        "--only, --skip, ...) are listed by `preflight run --help` (and `preflight launch --help`).\n"
        "A word you do not know: `preflight explain glossary`.",
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--version", action="version", version=f"preflight {__version__}")
    commands = parser.add_subparsers(dest="command",
                                     metavar="{run,launch,list,explain,report,history,hardware,nccl-log}",
                                     parser_class=OneLineParser)

    run = commands.add_parser("run", help="run as this process's rank (srun, torchrun, mpirun, env://)",
                              description="Run the checks and probes as this process's rank, under the job's own "
                              "launcher (srun, torchrun, mpirun, env://); every rank exits with rank 0's verdict.",
                              epilog=EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_run_options(run)

    launch = commands.add_parser("launch", help="spawn N local ranks with torch's elastic launcher",
                                 description="Spawn N ranks on this machine with torch's elastic launcher (as "
                                 "torchrun does) and run the checks and probes in them: a smoke test of one node.",
                                 epilog=EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter)
    launch.add_argument("-n", "--nproc", type=_local_ranks, default=4, metavar="N",
                        help=f"local ranks to spawn, 1 to {MAX_LOCAL_RANKS} (default 4)")
    launch.add_argument("--start-method", choices=("forkserver", "exec"), default="forkserver",
                        help="how ranks start: forkserver (default): ranks fork from one process that imported "
                             "torch once; "
                             "exec: every rank is a new `preflight run` process, as torchrun starts a "
                             "training script (each imports torch; per-interpreter hooks such as "
                             "sitecustomize run in every rank)")
    add_run_options(launch)

    listing = commands.add_parser("list", help="list every check with its id, tag, scope and severity",
                                  description="List every check preflight runs: its stable id, tag (what --only and "
                                  "--skip select), scope (`preflight explain engine`), severity and what it checks.")
    listing.add_argument("--markdown", action="store_true",
                         help="print every check's whole explanation as one Markdown page instead "
                         "(default: a table)")
    explain = commands.add_parser("explain", help="explain a check id or a word: what it checks, its severity rule",
                                  description="Explain a check (what it checks, why, its severity rule, what to do) "
                                  "or a word the help and reports use (`preflight explain glossary` lists them).")
    explain.add_argument("check_id", metavar="CHECK_ID",
                         help="a check id as `preflight list` shows it, e.g. BW003 (case-insensitive), or a word: "
                         "glossary, siblings, engine, could-not-run, known-good, busbw, straggler, ...")

    report = commands.add_parser("report", help="re-render a past run's JSON report",
                                 description="Render a past run again from its JSON (--json PATH of the run): "
                                 "the text on stdout and any of the formats below, or choose the best N hosts "
                                 "of it (--keep N).")
    report.add_argument("json_file", metavar="JSON_FILE", help="a report written by `preflight --json PATH`")
    report.add_argument("--html", dest="html_path", metavar="PATH", help="write the HTML report (default: not written)")
    report.add_argument("--junit", dest="junit_path", metavar="PATH", help="write JUnit XML (default: not written)")
    report.add_argument("--text", dest="text_path", metavar="PATH",
                        help="write the plain text report to a file (default: not written; stdout always gets it)")
    report.add_argument("--exclude-file", metavar="PATH",
                        help="write the bad hosts one per line (default: not written)")
    report.add_argument("--retry-exclude-file", metavar="PATH",
                        help="the bad hosts when the failure is theirs alone (what a resubmission excludes); "
                        "empty when resubmitting cannot help (default: not written)")
    report.add_argument("--json", dest="json_path", metavar="PATH",
                        help="write the JSON again, e.g. to normalise an older report; - for stdout, the verdict "
                        "then on stderr (default: not written)")

    spares = report.add_argument_group("spare nodes (asked for N+k nodes, train on the best N)")
    spares.add_argument("--keep", type=_kept_hosts, metavar="N",
                        help="choose the best N hosts: those a host-fault error names are dropped first, then "
                        "the slowest, then the job's later ones; prints kept / dropped and why, adds that "
                        "section to --json/--html/--text; exit 0 when N hosts were kept, 3 when not "
                        "(too few healthy hosts, or an error every host shares) (default: no choice)")
    spares.add_argument("--hostfile", metavar="PATH",
                        help="with --keep: write the kept hosts one per line (empty when none were chosen), "
                        "for srun --nodelist, torchrun or mpirun (default: not written)")
    from preflight.commands.drain import add_flags as add_drain_flags

    add_drain_flags(report)  # --drain [--yes] [--drain-warnings]: commands/drain.py

    hardware = commands.add_parser("hardware", help="print the GPU table the device probes judge by (SKU peaks, "
                                   "memory, PCIe, NVLink, sources)")
    hardware.add_argument("--match", metavar="NAME", dest="match_name",
                          help='say which row a device name (torch\'s or NVML\'s) matches and why, e.g. '
                          '"NVIDIA GH200 480GB" (default: print the whole table)')

    from preflight.commands.history import add_parser as add_history

    add_history(commands)
    from preflight.commands.nccl_log import add_parser as add_nccl_log

    add_nccl_log(commands)
    return parser



def _with_default_command(argv: list[str]) -> list[str]:
    """`preflight [options]` is `preflight run [options]`; a first word that is neither an option nor
    a command is a mistyped command (`preflight lsit`): BadInput naming the closest one."""
    if not argv:
        return ["run"]
    if argv[0] in SUBCOMMANDS or argv[0] in ("-h", "--help", "--version"):
        return argv
    if not argv[0].startswith("-"):
        close = difflib.get_close_matches(argv[0], SUBCOMMANDS, n=1, cutoff=0.5)
        guess = f"did you mean `preflight {close[0]}`? " if close else ""
        raise BadInput(f"unknown command {argv[0][:40]!r} ({guess}commands: {', '.join(SUBCOMMANDS)})")
    return ["run", *argv]


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the `preflight` script and `python -m preflight`."""
    argv_was_none = argv is None
    raw = list(sys.argv[1:] if argv is None else argv)
    for stream in (sys.stdout, sys.stderr):  # a non-UTF-8 byte in argv or env is printed escaped, never a traceback
        try:
            stream.reconfigure(errors="backslashreplace")  # type: ignore[union-attr]
        except (AttributeError, ValueError, OSError):
            pass
    try:
        argv = _with_default_command(raw)
        refuse_launch_flags_on_run(argv)
        argv = attach_dashed_values(argv, {o.flag for o in OPTIONS if o.kind is not FLAG}, {o.flag for o in OPTIONS})
    except BadInput as exc:
        print(f"preflight: error: {exc}", file=sys.stderr)
        return int(ExitCode.BAD_INPUT)
    parser = build_parser()
    try:
        args = parser.parse_args(argv)  # argparse prints one line on a bad flag
    except SystemExit as exc:  # 2 on a bad flag, 0 after --help / --version: a code, never an exception
        return exc.code if isinstance(exc.code, int) else int(ExitCode.BAD_INPUT)
    try:
        code = _dispatch(args, argv)
    except BadInput as exc:
        print(f"preflight: error: {exc}", file=sys.stderr)
        return int(ExitCode.BAD_INPUT)
    except Interrupted as stop:  # outside the run's steps (they handle their own): one line, and out at once
        leave_now(f"preflight: {args.command}: stopped ({stop}); exit {int(ExitCode.INCOMPLETE)}")
    except BrokenPipeError:
        return _reader_gone(args.command)
    if argv_was_none and args.command in ("launch", "run"):
        # `preflight launch` or a rank's `preflight run` as a program: the verdict is out and the
        # reports are written. The interpreter's shutdown with torch loaded would add 0.3-1 s before
        # the shell (or the job script, or torchrun's agent) sees the code, and it can abort the
        # process (SIGABRT after a passing run: 3 of 30 loaded affinity runs, once in CI's clock
        # test): a daemon thread inside a c10d store call when the interpreter finalises is unwound
        # through C++ and std::terminate is called. An in-process caller (argv given) returns as usual.
        # The exit hooks still run first, as at a normal exit (logging's flush, a profiler's or a
        # user's sitecustomize's atexit): only the finalisation is skipped.
        atexit._run_exitfuncs()
        exit_at_once(code)
    return code


def _reader_gone(command: str) -> int:
    """stdout's reader left (`preflight list | head`): no traceback, now or at exit.

    Listing and explaining printed what the reader wanted; anything else lost output on the way,
    which is an incomplete run (the reports written to files are unaffected).
    """
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())  # the interpreter's final flush must not fail again
    return int(ExitCode.PASSED if command in ("list", "explain", "hardware") else ExitCode.INCOMPLETE)


def _current_folder_exists() -> None:
    """BadInput where this process's working folder was removed (a job's scratch folder cleaned under a
    shell still in it): torch's import then died in MKL ("Cannot load libtorch_cpu.so") and `launch` with
    a traceback; relative report paths could not be written either."""
    try:
        os.getcwd()
    except FileNotFoundError:
        raise BadInput("the current folder no longer exists (removed while this shell was in it): "
                       "cd to one that does") from None


def _dispatch(args: argparse.Namespace, argv: list[str]) -> int:
    if args.command == "list":
        from preflight.commands.explain import print_list

        return print_list(markdown=args.markdown)
    if args.command == "explain":
        from preflight.commands.explain import print_explanation

        return print_explanation(args.check_id)
    if args.command == "hardware":
        from preflight.commands.hardware import print_match, print_table

        return print_match(args.match_name) if args.match_name is not None else print_table()
    _current_folder_exists()  # every command below reads or writes files, relative ones too
    if args.command == "report":
        from preflight.commands.rerender import rerender

        return rerender(args)
    if args.command == "history":
        from preflight.commands.history import run_history

        return run_history(args)
    if args.command == "nccl-log":
        from preflight.commands.nccl_log import run as run_nccl_log

        return run_nccl_log(args)
    options = options_from_args(args, argv)  # validated where it is built (RunOptions.__post_init__)
    # The first SIGTERM / SIGINT ends the run with what it knows (exit 4); a second one at once.
    with interrupts_raised(second_exits=True):
        if args.command == "launch":
            from preflight.commands.launch import launch

            code = launch(args.nproc, argv[1:], options, args.start_method)
        else:
            from preflight.runner import run

            code = run(options)
    # The verdict is known and the reports are written. A launcher that stops its workers now
    # (torchrun's agent, once one rank exited on a failing verdict) must not turn this rank's
    # exit code into -15 while the interpreter shuts down.
    ignore_interrupts()
    return code
