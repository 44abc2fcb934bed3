"""Drain on request: tell Slurm about the nodes preflight found failing, so the next job avoids them.

`preflight report r.json --drain` (the hosts a failed run blames: the `--retry-exclude-file`
rule, lib/host_fault.py) and `preflight history exclude --flaky --drain` (HIS003's flaky hosts)
print one `scontrol update NodeName=... State=DRAIN Reason="preflight <id>: <finding>"` per node;
`--drain --yes` runs them with Slurm's own client. A dry run is the default; warnings never
drain a node unless `--drain-warnings` asks. Each failure is one line (scontrol's own message),
and the exit code is the number of drains that failed (0: every node drained).
"""

from __future__ import annotations

import argparse
import re
import shutil
import subprocess
import sys
from collections.abc import Iterable, Sequence

from msgspec import Struct

from preflight.lib.errors import BadInput
from preflight.lib.grouping import ranks_per_host
from preflight.lib.host_fault import retry_hosts
from preflight.model import ExitCode, Finding, JobReport, Severity
from preflight.model.history_records import Flaky

# Slurm keeps a node's reason as one string (`scontrol show node`'s Reason=, sinfo -R's REASON
# column, cut at 20 characters by default there). One printable ASCII line, no double quote (the
# printed command quotes it), at most 200 characters: readable in full in `scontrol show node`.
MAX_REASON = 200
SCONTROL_TIMEOUT_S = 60  # scontrol retries an unreachable slurmctld for MessageTimeout (10 s) and more
MAX_EXIT = 100  # exit codes above this mean other things to shells (126-165: not found, signals)


class Drain(Struct, frozen=True):
    """One node to drain and why."""

    node: str
    reason: str

    def argv(self) -> list[str]:
        """The scontrol command (no shell: the reason needs no quoting)."""
        return ["scontrol", "update", f"NodeName={self.node}", "State=DRAIN", f"Reason={self.reason}"]

    def shown(self) -> str:
        """The command as a person would type it."""
        return f'scontrol update NodeName={self.node} State=DRAIN Reason="{self.reason}"'


def reason_text(check_id: str, message: str) -> str:
    """`preflight NCCL008: <message>`, one printable line within MAX_REASON."""
    text = re.sub(r"\s+", " ", f"preflight {check_id}: {message}").replace('"', "'")
    text = "".join(c if " " <= c <= "~" else "?" for c in text).strip()
    return text if len(text) <= MAX_REASON else text[:MAX_REASON - 3] + "..."


_NODE = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,199}")


def from_report(report: JobReport, warnings: bool = False) -> list[Drain]:
    """The nodes a failed run blames (each with the first error naming it); with `warnings`, also
    hosts a warning names where it names some hosts but not every one."""
    everyone = ranks_per_host(report.ranks).keys()  # a loaded report's host column: no RankFacts built
    nodes: dict[str, Finding] = {}
    blamed = set(retry_hosts(report))
    for finding in report.findings:
        if finding.severity == Severity.ERROR:
            for host in finding.hosts:
                if host in blamed:
                    nodes.setdefault(host, finding)
    if warnings:
        for finding in report.findings:
            named = set(finding.hosts)
            if finding.severity == Severity.WARN and named and not named >= everyone:
                for host in finding.hosts:
                    nodes.setdefault(host, finding)
    return [Drain(host, reason_text(f.check_id, f.message)) for host, f in nodes.items() if _NODE.fullmatch(host)]


def from_flaky(flaky: Iterable[Flaky], check_id: str = "HIS003") -> list[Drain]:
    """One drain per flaky host: `preflight HIS003: failed 3 of its last 10 runs (<run ids>)`."""
    return [Drain(f.host, reason_text(check_id, f"failed {f.failed} of its last {f.runs} runs "
                                                f"({', '.join(f.run_ids[:3])})"))
            for f in flaky if _NODE.fullmatch(f.host)]


def add_flags(parser: argparse.ArgumentParser) -> None:
    """--drain, --yes, --drain-warnings on a subcommand's parser."""
    group = parser.add_argument_group("drain (Slurm)")
    group.add_argument("--drain", action="store_true",
                       help="print the scontrol commands that drain the failing nodes with a reason (default: no)")
    group.add_argument("--yes", action="store_true", help="with --drain: run them (default: a dry run)")
    group.add_argument("--drain-warnings", action="store_true",
                       help="with --drain: also nodes only a warning names (default: errors only)")


def check_flags(args: argparse.Namespace) -> None:
    """--yes and --drain-warnings mean something only with --drain."""
    for flag in ("yes", "drain_warnings"):
        if getattr(args, flag, False) and not args.drain:
            raise BadInput(f"--{flag.replace('_', '-')} needs --drain")


def none_from_report(report: JobReport, warnings: bool = False) -> str:
    """Why a report names no node to drain, in words (from_report's rule, told back)."""
    from preflight.lib.host_fault import job_error

    errors = [f for f in report.findings if f.severity == Severity.ERROR]
    warned = any(f.severity == Severity.WARN and f.hosts for f in report.findings)
    if report.exit_code == int(ExitCode.INCOMPLETE):
        return "the run is incomplete (exit 4): it proves nothing about a node"
    if not errors:
        verdict = "passed" if report.exit_code == 0 else f"ended with exit {report.exit_code}"
        hint = "" if warnings or not warned else "; only warnings name nodes (--drain-warnings drains those too)"
        return f"the run {verdict} with no error{hint}"
    shared = job_error(report)
    if shared is not None:
        return (f"the error is the job's, not a node's ({shared.check_id} names no host or every host: "
                f"fix the job, draining would not help)")
    return "no error names a node"


def carry_out(drains: Sequence[Drain], yes: bool, why_none: str = "") -> int:
    """Print every command; with `yes`, run them. The number that failed (at most MAX_EXIT).
    `why_none`: said when there is no node to drain (`none_from_report`)."""
    if not drains:
        print(f"# preflight: no node to drain{': ' + why_none if why_none else ''}", file=sys.stderr)
        return 0
    for drain in drains:
        print(drain.shown())
    if not yes:
        print(f"# preflight: dry run; --drain --yes drains {len(drains)} node(s)", file=sys.stderr)
        return 0
    if shutil.which("scontrol") is None:
        print(f"preflight: drain: scontrol not found on PATH (Slurm's client, e.g. apt install slurm-client): "
              f"{len(drains)} node(s) not drained", file=sys.stderr)
        return min(len(drains), MAX_EXIT)
    failed = 0
    for index, drain in enumerate(drains):
        error = _run(drain)
        if error is None:
            print(f"preflight: drained {drain.node}", file=sys.stderr)
            continue
        failed += 1
        if "contact slurm controller" in error.lower():  # every other node would fail the same way
            rest = len(drains) - index - 1
            print(f"preflight: drain {drain.node}: {error}" + (f" ({rest} more not tried)" if rest else ""),
                  file=sys.stderr)
            return min(failed + rest, MAX_EXIT)
        print(f"preflight: drain {drain.node}: {error}", file=sys.stderr)
    return min(failed, MAX_EXIT)


def _run(drain: Drain) -> str | None:
    """None when scontrol drained the node, else its message as one line."""
    try:
        done = subprocess.run(drain.argv(), capture_output=True, text=True, timeout=SCONTROL_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        return f"scontrol did not answer within {SCONTROL_TIMEOUT_S} s"
    except OSError as exc:
        return f"scontrol: {exc.strerror or exc}"
    if done.returncode == 0:
        return None
    lines = [line.strip() for line in (done.stderr + done.stdout).splitlines() if line.strip()]
    return (lines[-1] if lines else f"scontrol exited {done.returncode}")[:300]
