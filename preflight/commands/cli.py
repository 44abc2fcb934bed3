"""Command line: `preflight [run options]`, `launch`, `list`, `explain`, `report`.

Bad input anywhere (flags, env, mesh strings) ends in one line on stderr and exit code 2,
never a traceback.
"""

from __future__ import annotations

import argparse
import os
import shlex
import signal
import sys
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from types import FrameType

from preflight import __version__
from preflight.lib.errors import BadInput, Interrupted
from preflight.lib.hostlist import MAX_HOSTS
from preflight.lib.numbers import ascii_decimal, ascii_int
from preflight.model import ExitCode
from preflight.options import BACKENDS, LOCALIZE, ReportTargets, RunOptions

SUBCOMMANDS = ("run", "launch", "list", "explain", "report")

EPILOG = """exit codes: 0 passed (warnings allowed), 1 warnings with --strict, 2 bad usage or input,
3 failed (errors, missing ranks), 4 incomplete (a check could not run, or interrupted).
Every rank exits with rank 0's verdict, so `srun preflight` fails the job step on a bad verdict."""


def _csv(text: str) -> list[str]:
    items = [item.strip() for item in text.split(",")]
    if any(not item for item in items):
        raise argparse.ArgumentTypeError(f"{text!r} has an empty entry")
    return items


MAX_SECONDS = 7 * 24 * 3600.0  # a timeout above a week is a typo (and inf or nan is never a deadline)
MAX_COUNT = 1_000_000  # --warmup, --iters
MAX_LOCAL_RANKS = 4096  # launch -n


def _positive_float(text: str) -> float:
    """A positive decimal in ASCII digits, at most MAX_SECONDS (no exponent, inf, nan or `٣`)."""
    if text.strip().startswith("-"):
        raise argparse.ArgumentTypeError(f"{text[:40]!r} must be positive")
    try:
        value = ascii_decimal(text, "value", maximum=MAX_SECONDS)
    except BadInput as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None
    if value <= 0:
        raise argparse.ArgumentTypeError(f"{text!r} must be positive")
    return value


def _non_negative_int(text: str) -> int:
    try:
        return ascii_int(text, "value", minimum=0, maximum=MAX_COUNT)
    except BadInput as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def _run_id(text: str) -> str:
    """At most 200 printable characters without spaces: it becomes store keys and a folder name."""
    if not 0 < len(text) <= 200 or not text.isprintable() or any(c.isspace() for c in text):
        raise argparse.ArgumentTypeError(f"{text[:40]!r} is not a run id (1-200 printable characters, no spaces)")
    return text


def _local_ranks(text: str) -> int:
    try:
        return ascii_int(text, "-n", minimum=1, maximum=MAX_LOCAL_RANKS)
    except BadInput as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def _kept_hosts(text: str) -> int:
    try:
        return ascii_int(text, "--keep", minimum=1, maximum=MAX_HOSTS)
    except BadInput as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def add_run_options(parser: argparse.ArgumentParser) -> None:
    """The options of a run, shared by `run` and `launch`."""
    run = parser.add_argument_group("run")
    run.add_argument("--timeout", dest="timeout_s", type=_positive_float, default=60.0,
                     help="seconds rank 0 waits for every rank to report (default 60)")
    run.add_argument("--check-timeout", dest="check_timeout_s", type=_positive_float, default=10.0,
                     help="seconds one check or fact gatherer may take (default 10)")
    run.add_argument("--out-dir", help="shared directory (cluster filesystem): fallback channel when "
                     "the c10d store cannot form")
    run.add_argument("--run-id", type=_run_id, help="override the run id derived from the launcher's job id")
    run.add_argument("--silence", type=_csv, default=[], metavar="ID[,ID]", help="drop findings of these ids")
    run.add_argument("--only", type=_csv, default=[], metavar="TAG[,TAG]", help="run only checks of these tags")
    run.add_argument("--skip", type=_csv, default=[], metavar="TAG[,TAG]", help="skip checks of these tags")
    run.add_argument("--strict", action="store_true", help="exit 1 when there are warnings")
    run.add_argument("--sysfs-root", default="/sys", help=argparse.SUPPRESS)
    run.add_argument("--verdict-file", default=None, help=argparse.SUPPRESS)

    out = parser.add_argument_group("reports")
    out.add_argument("--json", dest="json_path", metavar="PATH", help="write the JobReport as JSON")
    out.add_argument("--html", dest="html_path", metavar="PATH", help="write a self-contained HTML report")
    out.add_argument("--junit", dest="junit_path", metavar="PATH", help="write JUnit XML")
    out.add_argument("--text", dest="text_path", metavar="PATH", help="write the plain text report")
    out.add_argument("--exclude-file", metavar="PATH", help="write bad hosts, one per line, for sbatch --exclude")
    out.add_argument("--quiet", action="store_true", help="print nothing on stdout")

    probe = parser.add_argument_group("probes")
    probe.add_argument("--mesh", default="", help="DeviceMesh shape, outermost first, e.g. pp2,tp4")
    probe.add_argument("--backend", choices=BACKENDS, default="auto")
    probe.add_argument("--ops", default="", help="collectives to probe (comma list)")
    probe.add_argument("--sizes", default="", help="message sizes, e.g. 1M,64M,256M")
    probe.add_argument("--warmup", type=_non_negative_int, default=None)
    probe.add_argument("--iters", type=_non_negative_int, default=None)
    probe.add_argument("--probe-timeout", dest="probe_timeout_s", type=_positive_float, default=30.0,
                       help="deadline of one collective (default 30 s)")
    probe.add_argument("--straggler-ratio", type=_positive_float, default=0.8)
    probe.add_argument("--expect", default="", help="expected busbw per dimension, e.g. tp=300GB/s")
    probe.add_argument("--localize", choices=LOCALIZE, default="auto",
                       help="how slow groups are localized: auto (default; see docs/probes.md), pairwise "
                            "(the round robin only), grouptest (group testing among hosts whenever it can run)")
    probe.add_argument("--strict-bandwidth", action="store_true",
                       help="a group below its hardware profile (docs/expectations.md) is an error, not a warning")


def build_parser() -> argparse.ArgumentParser:
    """The whole CLI."""
    parser = argparse.ArgumentParser(
        prog="preflight",
        description="Validate a distributed PyTorch job from inside its own launcher, before it starts. "
        "Without a subcommand, `preflight [options]` is `preflight run [options]`.",
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--version", action="version", version=f"preflight {__version__}")
    commands = parser.add_subparsers(dest="command", metavar="{run,launch,list,explain,report}")

    run = commands.add_parser("run", help="run as this process's rank (srun, torchrun, mpirun, env://)",
                              epilog=EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_run_options(run)

    launch = commands.add_parser("launch", help="spawn N local ranks with torch's elastic launcher",
                                 epilog=EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter)
    launch.add_argument("-n", "--nproc", type=_local_ranks, default=4, help="local ranks to spawn (default 4)")
    launch.add_argument("--start-method", choices=("forkserver", "exec"), default="forkserver",
                        help="forkserver (default): ranks fork from one process that imported torch once; "
                             "exec: every rank is a new `preflight run` process, as torchrun starts a "
                             "training script (each imports torch; per-interpreter hooks such as "
                             "sitecustomize run in every rank)")
    add_run_options(launch)

    listing = commands.add_parser("list", help="list every check with its id, tag, scope and severity")
    listing.add_argument("--markdown", action="store_true",
                         help="print docs/checks.md instead (preflight list --markdown > docs/checks.md)")
    explain = commands.add_parser("explain", help="explain a check id")
    explain.add_argument("check_id")

    report = commands.add_parser("report", help="re-render a past run's JSON report")
    report.add_argument("json_file")
    report.add_argument("--html", dest="html_path", metavar="PATH")
    report.add_argument("--junit", dest="junit_path", metavar="PATH")
    report.add_argument("--text", dest="text_path", metavar="PATH")
    report.add_argument("--exclude-file", metavar="PATH")
    report.add_argument("--retry-exclude-file", metavar="PATH",
                        help="the bad hosts when the failure is theirs alone (what a resubmission excludes); "
                        "empty when resubmitting cannot help")
    report.add_argument("--json", dest="json_path", metavar="PATH")
    spares = report.add_argument_group("spare nodes (asked for N+k nodes, train on the best N)")
    spares.add_argument("--keep", type=_kept_hosts, metavar="N",
                        help="choose the best N hosts: those a host-fault error names are dropped first, then "
                        "the slowest, then the job's later ones; prints kept / dropped and why, adds that "
                        "section to --json/--html/--text; exit 0 when N hosts were kept, 3 when not "
                        "(too few healthy hosts, or an error every host shares)")
    spares.add_argument("--hostfile", metavar="PATH",
                        help="with --keep: write the kept hosts one per line (empty when none were chosen), "
                        "for srun --nodelist, torchrun or mpirun")
    return parser


def options_from_args(args: argparse.Namespace, argv: Sequence[str]) -> RunOptions:
    """RunOptions from parsed flags: the one place this process parses --mesh, --sizes, --ops, --expect."""
    return RunOptions.parse(
        mesh=args.mesh,
        sizes=args.sizes,
        ops=args.ops,
        expect=args.expect,
        timeout_s=args.timeout_s,
        check_timeout_s=args.check_timeout_s,
        out_dir=args.out_dir,
        run_id=args.run_id,
        silence=list(args.silence),
        only=list(args.only),
        skip=list(args.skip),
        strict=args.strict,
        reports=ReportTargets(json=args.json_path, html=args.html_path, junit=args.junit_path,
                              text=args.text_path, exclude=args.exclude_file, quiet=args.quiet),
        backend=args.backend,
        warmup=args.warmup,
        iters=args.iters,
        probe_timeout_s=args.probe_timeout_s,
        straggler_ratio=args.straggler_ratio,
        strict_bandwidth=args.strict_bandwidth,
        localize=args.localize,
        sysfs_root=args.sysfs_root,
        verdict_file=args.verdict_file,
        command_line=shlex.join(["preflight", *argv]),
    )


def _with_default_command(argv: list[str]) -> list[str]:
    if not argv:
        return ["run"]
    if argv[0] in SUBCOMMANDS or argv[0] in ("-h", "--help", "--version"):
        return argv
    return ["run", *argv]


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the `preflight` script and `python -m preflight`."""
    raw = list(sys.argv[1:] if argv is None else argv)
    for stream in (sys.stdout, sys.stderr):  # a non-UTF-8 byte in argv or env is printed escaped, never a traceback
        try:
            stream.reconfigure(errors="backslashreplace")  # type: ignore[union-attr]
        except (AttributeError, ValueError, OSError):
            pass
    argv = _with_default_command(raw)
    parser = build_parser()
    try:
        args = parser.parse_args(argv)  # argparse prints one line on a bad flag
    except SystemExit as exc:  # 2 on a bad flag, 0 after --help / --version: a code, never an exception
        return exc.code if isinstance(exc.code, int) else int(ExitCode.BAD_INPUT)
    try:
        return _dispatch(args, argv)
    except BadInput as exc:
        print(f"preflight: error: {exc}", file=sys.stderr)
        return int(ExitCode.BAD_INPUT)
    except BrokenPipeError:
        return _reader_gone(args.command)


def _reader_gone(command: str) -> int:
    """stdout's reader left (`preflight list | head`): no traceback, now or at exit.

    Listing and explaining printed what the reader wanted; anything else lost output on the way,
    which is an incomplete run (the reports written to files are unaffected).
    """
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())  # the interpreter's final flush must not fail again
    return int(ExitCode.PASSED if command in ("list", "explain") else ExitCode.INCOMPLETE)


def _dispatch(args: argparse.Namespace, argv: list[str]) -> int:
    if args.command == "list":
        from preflight.commands.explain import print_list

        return print_list(markdown=args.markdown)
    if args.command == "explain":
        from preflight.commands.explain import print_explanation

        return print_explanation(args.check_id)
    if args.command == "report":
        from preflight.commands.rerender import rerender

        return rerender(args)
    options = options_from_args(args, argv)
    validate_selection(options)
    if args.command == "launch":
        from preflight.commands.launch import launch

        return launch(args.nproc, argv[1:], options, args.start_method)
    from preflight.runner import run

    with interrupts_raised():
        code = run(options)
    # The verdict is known and the reports are written. A launcher that stops its workers now
    # (torchrun's agent, once one rank exited on a failing verdict) must not turn this rank's
    # exit code into -15 while the interpreter shuts down.
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    return code


@contextmanager
def interrupts_raised() -> Iterator[None]:
    """SIGTERM / SIGINT (a Slurm time limit, scancel, Ctrl-C) raise Interrupted, so the run
    finishes with what it knows and rank 0 still writes its report."""

    def raise_interrupted(signum: int, frame: FrameType | None) -> None:
        raise Interrupted(f"received {signal.Signals(signum).name}")

    previous = {}
    for signum in (signal.SIGTERM, signal.SIGINT):
        try:
            previous[signum] = signal.signal(signum, raise_interrupted)
        except ValueError:  # not the main thread (tests): keep the defaults
            pass
    try:
        yield
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)


def validate_selection(options: RunOptions) -> None:
    """Reject unknown tags and check ids before any rank starts (the registry knows them)."""
    from preflight.registry import Tags, get_check

    for tag in (*options.only, *options.skip):
        if tag not in Tags.all():
            raise BadInput(f"unknown tag {tag!r}; known tags: {', '.join(Tags.all())}")
    for check_id in options.silence:
        if get_check(check_id) is None:
            raise BadInput(f"--silence {check_id}: no such check id (see `preflight list`)")
