"""Command line: `preflight [run options]`, `launch`, `list`, `explain`, `report`.

Bad input anywhere (flags, env, mesh strings) ends in one line on stderr and exit code 2,
never a traceback.
"""

from __future__ import annotations

import argparse
import atexit
import difflib
import os
import shlex
import sys
from collections.abc import Sequence
from typing import NoReturn

from preflight import __version__
from preflight.lib.errors import BadInput, Interrupted
from preflight.lib.hostlist import MAX_HOSTS
from preflight.lib.interrupts import exit_at_once, ignore_interrupts, interrupts_raised, leave_now
from preflight.lib.numbers import ascii_int
from preflight.lib.storage_options import storage_path
from preflight.model import ExitCode
from preflight.options import (
    BACKENDS,
    LOCALIZE,
    OPS,
    ReportTargets,
    RunOptions,
    history_url,
    parse_count,
    parse_seconds,
)

SUBCOMMANDS = ("run", "launch", "list", "explain", "report", "history", "hardware")

EPILOG = """exit codes: 0 passed (warnings allowed), 1 warnings with --strict, 2 bad usage or input,
3 failed (errors, missing ranks), 4 incomplete (a check could not run, interrupted, or an
output asked for could not be written after the run: the headline starts NOT WRITTEN).
Every rank exits with rank 0's verdict, so `srun preflight` fails the job step on a bad verdict."""


def _csv(text: str) -> list[str]:
    items = [item.strip() for item in text.split(",")]
    if any(not item for item in items):
        raise argparse.ArgumentTypeError(f"{text!r} has an empty entry")
    return items


MAX_LOCAL_RANKS = 4096  # launch -n


def _positive_float(text: str) -> float:
    """--timeout and kin: text to seconds (options.parse_seconds owns the bounds)."""
    try:
        return parse_seconds(text)
    except BadInput as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def _non_negative_float(text: str) -> float:
    """Zero or a positive decimal (as _positive_float)."""
    if text.strip() in ("0", "0.0"):
        return 0.0
    return _positive_float(text)


def _non_negative_int(text: str) -> int:
    try:
        return parse_count(text)
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


def _sizes_text(sizes: Sequence[int]) -> str:
    return ",".join(f"{size >> 20}M" for size in sizes)


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


def add_run_options(parser: argparse.ArgumentParser) -> None:
    """The options of a run, shared by `run` and `launch`: each says its default and valid values."""
    from preflight.probes.plan import DEFAULT_ITERS, DEFAULT_OPS, DEFAULT_SIZES, DEFAULT_WARMUP
    from preflight.registry import Tags

    tags = ", ".join(Tags.all())
    run = parser.add_argument_group("run")
    run.add_argument("--timeout", dest="timeout_s", type=_positive_float, default=60.0, metavar="SECONDS",
                     help="seconds rank 0 waits for every rank to report (default 60)")
    run.add_argument("--check-timeout", dest="check_timeout_s", type=_positive_float, default=10.0, metavar="SECONDS",
                     help="seconds one check or fact gatherer may take before it is could-not-run "
                     "(`preflight explain could-not-run`) (default 10)")
    run.add_argument("--out-dir", metavar="DIR",
                     help="shared directory (cluster filesystem): fallback channel when the c10d store cannot "
                     "form, and where each rank leaves its own report if rank 0 is lost (default: none)")
    run.add_argument("--run-id", type=_run_id, metavar="ID",
                     help="override the run id (default: derived from the launcher's job id, e.g. "
                     "SLURM_JOB_ID; 1-200 printable characters, no spaces)")
    run.add_argument("--silence", type=_csv, default=[], metavar="ID[,ID]",
                     help="drop findings of these check ids, e.g. ENV004,BW011 (default: none; "
                     "`preflight list` shows the ids)")
    run.add_argument("--only", type=_csv, default=[], metavar="TAG[,TAG]",
                     help=f"run only checks of these tags (default: all); tags: {tags}")
    run.add_argument("--skip", type=_csv, default=[], metavar="TAG[,TAG]",
                     help=f"skip checks of these tags (default: none; `--skip probe` skips the bandwidth "
                     f"probes); tags: {tags}")
    run.add_argument("--strict", action="store_true",
                     help="exit 1 when there are warnings (default: warnings exit 0)")
    run.add_argument("--fingerprint", type=_csv, default=[], metavar="PKG[,PKG]",
                     help="also fingerprint these installed distributions' builds (default: torch, "
                     "nvidia-* wheels and preflight; BLD001 compares them across hosts)")
    run.add_argument("--sysfs-root", default="/sys", help=argparse.SUPPRESS)  # tests: a fixture sysfs tree
    run.add_argument("--verdict-file", default=None, help=argparse.SUPPRESS)  # launch's own channel to its ranks

    out = parser.add_argument_group("reports (the terminal report is always printed unless --quiet)")
    out.add_argument("--json", dest="json_path", metavar="PATH",
                     help="write the whole JobReport as JSON (default: not written; `preflight report` re-renders it)")
    out.add_argument("--html", dest="html_path", metavar="PATH",
                     help="write a self-contained HTML report, no network needed (default: not written)")
    out.add_argument("--junit", dest="junit_path", metavar="PATH",
                     help="write JUnit XML, one testcase per check, for CI (default: not written)")
    out.add_argument("--text", dest="text_path", metavar="PATH",
                     help="write the plain text report (default: not written)")
    out.add_argument("--exclude-file", metavar="PATH",
                     help="write the bad hosts one per line, for `sbatch --exclude` (default: not written)")
    out.add_argument("--quiet", action="store_true", help="print nothing on stdout (default: print the report)")

    history = parser.add_argument_group("history and metrics (`preflight explain history`)")
    history.add_argument("--history", metavar="URL", default=None,
                         help="record the run and judge it against its past: sqlite:///path/history.db or "
                              "postgresql://user@host/db (default: $PREFLIGHT_HISTORY)")
    history.add_argument("--history-timeout", dest="history_timeout_s", type=_positive_float, default=10.0,
                         metavar="SECONDS",
                         help="seconds the history may take before and after the verdict (default 10)")
    history.add_argument("--flaky", default="", metavar="K/N",
                         help="a host that failed in K of its last N recorded runs is flaky (default 3/10)")
    history.add_argument("--metrics", metavar="PATH",
                         help="write the run's figures as Prometheus text for node_exporter's textfile collector "
                              "(default: not written)")

    probe = parser.add_argument_group("probes (collective bandwidth over every DeviceMesh dimension)")
    probe.add_argument("--mesh", default="", metavar="SHAPE",
                       help="DeviceMesh shape, outermost first, e.g. pp2,tp4 (a missing dp is derived); "
                       "names: pp, dp, dp_replicate, dp_shard, cp, ep, tp or any identifier "
                       "(default: the world as one dimension)")
    probe.add_argument("--backend", choices=BACKENDS, default="auto",
                       help="process group backend for the probes: auto (default: nccl when every rank has a "
                       "GPU, else gloo), nccl, gloo")
    probe.add_argument("--ops", default="", metavar="OP[,OP]",
                       help=f"collectives to probe; valid: {', '.join(OPS)} "
                       f"(default: {','.join(DEFAULT_OPS)}; send_recv pairs adjacent pp stages)")
    probe.add_argument("--sizes", default="", metavar="SIZE[,SIZE]",
                       help="message sizes in bytes; K/M/G are binary as in nccl-tests (1M = 1 MiB = 1,048,576), "
                       "KiB/MiB/GiB too, KB/MB/GB are SI (1MB = 1,000,000) "
                       f"(default: {_sizes_text(DEFAULT_SIZES['cpu'])} on CPU, "
                       f"{_sizes_text(DEFAULT_SIZES['cuda'])} on GPU)")
    probe.add_argument("--warmup", type=_non_negative_int, default=None, metavar="N",
                       help=f"untimed iterations per step, 0 or more (default {DEFAULT_WARMUP['cpu']} on CPU, "
                       f"{DEFAULT_WARMUP['cuda']} on GPU)")
    probe.add_argument("--iters", type=_non_negative_int, default=None, metavar="N",
                       help=f"timed iterations per step, 1 or more (default {DEFAULT_ITERS['cpu']} on CPU, "
                       f"{DEFAULT_ITERS['cuda']} on GPU; with fewer than 5 no straggler can be named)")
    probe.add_argument("--probe-timeout", dest="probe_timeout_s", type=_positive_float, default=30.0,
                       metavar="SECONDS", help="deadline of one collective (default 30)")
    probe.add_argument("--straggler-ratio", type=_positive_float, default=0.8, metavar="RATIO",
                       help="a group below RATIO x its siblings' median busbw is a straggler candidate, "
                       "0 < RATIO <= 1 (default 0.8); confirmed twice below 0.5 it is an error "
                       "(`preflight explain BW003`, `preflight explain siblings`)")
    probe.add_argument("--expect", default="", metavar="DIM=RATE[,DIM=RATE]",
                       help="expected busbw per mesh dimension, e.g. tp=300GB/s,dp=400Gb/s, and device figures, "
                       "e.g. gemm=700TFLOPS,hbm=2.8TB/s,h2d=50GB/s (`preflight explain expectations`); units GB/s "
                       "(1e9 B/s, nccl-tests' busbw), MB/s, TB/s, GiB/s or G/s (binary), Gb/s (bits); "
                       "below 0.9x is an error (default: none; a hardware profile on NCCL)")
    probe.add_argument("--device-budget", dest="device_budget_s", type=_positive_float, default=None,
                       metavar="SECONDS",
                       help="seconds the device probes may take per device (default 4 on a GPU, 0.03 on CPU; "
                            "`--skip gpu-probe` turns them off)")
    probe.add_argument("--device-sustain", dest="device_sustain_s", type=_non_negative_float, default=0.0,
                       metavar="SECONDS",
                       help="seconds of continuous bf16 work on each GPU after the device probes, its clocks and "
                            "temperature read throughout (`preflight explain sustain`) (default 0: none)")
    probe.add_argument("--localize", choices=LOCALIZE, default="auto",
                       help="how slow groups are localized (`preflight explain localize`): auto (default), pairwise "
                            "(the round robin only), grouptest (group testing among hosts whenever it can run)")
    probe.add_argument("--strict-bandwidth", action="store_true",
                       help="a group below 0.9x its hardware profile is an error (BW007), not a warning (BW011); "
                       "below --expect it is an error either way (default: off; `preflight explain expectations`)")
    add_storage_options(parser)


def add_storage_options(parser: argparse.ArgumentParser) -> None:
    """The storage family's flags (steps/storage.py): off unless --storage or PREFLIGHT_STORAGE names a path."""
    from preflight.lib.storage_options import DEFAULT_BUDGET, HEADROOM
    from preflight.lib.units import human_bytes

    storage = parser.add_argument_group("storage (the checkpoint path)")
    storage.add_argument("--storage", metavar="PATH", default=None,
                         help="the checkpoint directory every rank must see as one shared filesystem: checked "
                         "for visibility, sameness, room and write/read speed (default: $PREFLIGHT_STORAGE; "
                         "none: the family does not run)")
    storage.add_argument("--checkpoint-size", default="", metavar="SIZE",
                         help=f"what one save writes in total over all ranks, e.g. 800G (K/M/G/T binary): the "
                         f"path needs room for {HEADROOM:g} (the previous checkpoint is kept until the new one is "
                         "complete), and the report projects one save and one restore (default: none)")
    storage.add_argument("--storage-budget", default="", metavar="SIZE",
                         help=f"the most one rank writes and reads back per pass (default {human_bytes(DEFAULT_BUDGET)}"
                         "; each rank writes checkpoint-size / world when that is smaller)")


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
    commands = parser.add_subparsers(dest="command", metavar="{run,launch,list,explain,report,history,hardware}",
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
                        help="write the JSON again, e.g. to normalise an older report (default: not written)")

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
    return parser



def options_from_args(args: argparse.Namespace, argv: Sequence[str]) -> RunOptions:
    """RunOptions from parsed flags: the one place this process parses --mesh, --sizes, --ops, --expect."""
    return RunOptions.parse(
        mesh=args.mesh,
        sizes=args.sizes,
        ops=args.ops,
        expect=args.expect,
        flaky=args.flaky,
        history=history_url(args.history),
        storage=storage_path(args.storage),
        checkpoint_size=args.checkpoint_size,
        storage_budget=args.storage_budget,
        history_timeout_s=args.history_timeout_s,
        metrics=args.metrics,
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
        device_budget_s=args.device_budget_s,
        device_sustain_s=args.device_sustain_s,
        strict_bandwidth=args.strict_bandwidth,
        localize=args.localize,
        sysfs_root=args.sysfs_root,
        fingerprint=list(args.fingerprint),
        verdict_file=args.verdict_file,
        command_line=shlex.join(["preflight", *_password_hidden(shown_argv(argv), args.history)]),
    )


INTERNAL_FLAGS = ("--verdict-file", "--sysfs-root")  # set by `launch` or tests, never typed by a user


def shown_argv(argv: Sequence[str]) -> list[str]:
    """argv as the reports show it: without the internal flags (and their values) launch adds."""
    shown: list[str] = []
    skip_value = False
    for arg in argv:
        if skip_value:
            skip_value = False
            continue
        if arg in INTERNAL_FLAGS:
            skip_value = True
            continue
        if arg.startswith(tuple(f"{flag}=" for flag in INTERNAL_FLAGS)):
            continue
        shown.append(arg)
    return shown


def _password_hidden(argv: Sequence[str], url: str | None) -> list[str]:
    """argv with the --history URL's password replaced by *** (the command line lands in every report)."""
    if not url or "@" not in url:
        return list(argv)
    from preflight.history.store import shown_url

    return [word.replace(url, shown_url(url)) for word in argv]




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
    if args.command == "hardware":
        from preflight.commands.hardware import print_match, print_table

        return print_match(args.match_name) if args.match_name is not None else print_table()
    if args.command == "history":
        from preflight.commands.history import run_history

        return run_history(args)
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
