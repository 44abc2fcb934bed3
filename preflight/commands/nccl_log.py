"""`preflight nccl-log FILE... [--json]`: NCCL's account and findings from logs a user already has.

Reads NCCL INFO logs of any job (one file per rank, or one file where ranks interleave with
their `host:pid:tid [dev] NCCL INFO` prefixes) through the parser a run uses (lib/nccl_log.py),
folds them per host (lib/nccl_summary.py) and runs the same checks a run does
(checks/nccl_account.py), with no hardware facts: the evidence is the log's other hosts.
Exit 3 on an error finding, 0 otherwise; 2 (one line) on a file that cannot be read or holds
no NCCL line.
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

from preflight.checks.nccl_account import ACCOUNT_CHECKS, NcclJob
from preflight.lib.errors import BadInput
from preflight.lib.nccl_log import LogRead, read_log_file
from preflight.lib.nccl_summary import host_accounts
from preflight.model import ExitCode, Finding, Severity
from preflight.model.codec import encode, to_builtins
from preflight.model.nccl_account import NcclAccount

MAX_FILES = 4096


def add_parser(commands: Any) -> None:
    """The `nccl-log` subcommand."""
    parser = commands.add_parser(
        "nccl-log", help="read NCCL INFO logs: network, GPUDirect RDMA, transports per rank and host, and findings",
        description="Read NCCL INFO logs (NCCL_DEBUG=INFO; NCCL_DEBUG_SUBSYS=INIT,NET,GRAPH,ENV says most) from any "
        "job: one file per rank, or one file where ranks interleave. Prints NCCL's account per host and the "
        "findings (NCCL020-NCCL024). Exit 3 on an error finding, 0 otherwise, 2 on unreadable input.")
    parser.add_argument("files", nargs="+", metavar="FILE", help="NCCL log files (NCCL_DEBUG_FILE output, job logs)")
    parser.add_argument("--json", action="store_true", help="print JSON: per rank, per host, findings")


def read_files(paths: list[str]) -> list[LogRead]:
    """Every file parsed; BadInput (exit 2, one line) for one that cannot be read or holds no NCCL line."""
    if len(paths) > MAX_FILES:
        raise BadInput(f"{len(paths)} files is more than {MAX_FILES}")
    reads = []
    for path in paths:
        try:
            read = read_log_file(path)
        except OSError as exc:
            raise BadInput(f"{path[:200]}: cannot read: {exc.strerror or exc}") from None
        if not read.is_nccl_log():
            raise BadInput(f"{path[:200]}: no NCCL log line in it ({read.lines} line(s) read, {read.unreadable} "
                           f"unreadable); expected `host:pid:tid [dev] NCCL INFO ...` lines (NCCL_DEBUG=INFO)")
        reads.append(read)
    return reads


def job_of(reads: list[LogRead]) -> NcclJob:
    """The accounts of every file, keyed by rank (by order of appearance where a log names none)."""
    accounts: dict[int, NcclAccount] = {}
    unnamed = -1
    for read in reads:
        for account in read.accounts:
            if account.rank is not None and account.rank not in accounts:
                accounts[account.rank] = account
            else:
                accounts[unnamed] = account
                unnamed -= 1
    return NcclJob(accounts)


def findings_of(job: NcclJob) -> list[Finding]:
    """NCCL020-NCCL024 over the job's accounts."""
    found: list[Finding] = []
    for check in ACCOUNT_CHECKS:
        found += check.report(job)
    return found


def run(args: argparse.Namespace) -> int:
    """Print the account and findings; the exit code."""
    reads = read_files(list(args.files))
    job = job_of(reads)
    findings = findings_of(job)
    code = ExitCode.FAILED if any(f.severity == Severity.ERROR for f in findings) else ExitCode.PASSED
    if args.json:
        sys.stdout.write(encode(as_json(reads, job, findings)).decode() + "\n")
    else:
        print_text(reads, job, findings)
    return int(code)


def _rank_entry(account: NcclAccount) -> dict[str, Any]:
    return {"rank": account.rank, "host": account.host, "pid": account.pid, "source": account.source,
            "nccl_version": account.nccl_version, "network": account.network, "gdr": account.gdr,
            "gdr_reason": account.gdr_reason, "plugin": account.plugin.name if account.plugin.loaded else None,
            "plugin_why": account.plugin.why, "nics": to_builtins(account.nics),
            "intra_host": account.intra_transports(), "inter_host": account.network_transports(),
            "transports": {**account.intra, **account.inter}, "nvls": account.nvls_used,
            "channels": account.channels, "warnings": account.warnings, "warnings_total": account.warnings_total,
            "unreadable_lines": account.unreadable}


def as_json(reads: list[LogRead], job: NcclJob, findings: list[Finding]) -> dict[str, Any]:
    """The JSON document: files, per rank, per host, findings."""
    hosts = host_accounts(job.accounts, order=_order(job))
    return {
        "files": [{"path": r.path, "lines": r.lines, "nccl_lines": r.nccl_lines, "unreadable_lines": r.unreadable,
                   "truncated_bytes": r.truncated_bytes, "processes": len(r.accounts)} for r in reads],
        "ranks": [_rank_entry(job.accounts[r]) for r in _order(job)],
        "hosts": [{**to_builtins(h), "intra_host": h.intra, "inter_host": h.inter} for h in hosts],
        "findings": to_builtins(findings),
    }


def print_text(reads: list[LogRead], job: NcclJob, findings: list[Finding]) -> None:
    """One line per host, then the findings."""
    lines = sum(r.lines for r in reads)
    unreadable = sum(r.unreadable for r in reads)
    truncated = sum(r.truncated_bytes for r in reads)
    print(f"NCCL's account: {len(job.accounts)} process(es) in {len(reads)} file(s), {lines} line(s)"
          + (f", {unreadable} unreadable" if unreadable else "")
          + (f", {truncated} byte(s) past the read limit not read" if truncated else ""))
    for host in host_accounts(job.accounts, order=_order(job)):
        gdr = {True: "on", False: "OFF", None: "?"}[host.gdr]
        print(f"  {host.host}: ranks {_span(host.ranks)}  NCCL {host.nccl_version or '?'}  network "
              f"{host.network or '?'}{' (plugin ' + host.plugin + ')' if host.plugin else ''}  GDR {gdr}  "
              f"intra-host {', '.join(host.intra) or '-'}  inter-host {', '.join(host.inter) or '-'}"
              + (f"  NICs {', '.join(host.nics[:4])}" if host.nics else ""))
        if host.reason:
            print(f"    why: {host.reason}")
        for warning in host.warnings:
            print(f"    NCCL WARN {warning}")
    if not findings:
        print("no findings")
    for finding in findings:
        print(f"{finding.severity.value.upper()} {finding.check_id}: {finding.message}")
        print(f"  what to do: {finding.hint}")


def _order(job: NcclJob) -> list[int]:
    """Ranks in order, then the processes whose log named no rank (negative keys) in order of reading."""
    return sorted(job.accounts, key=lambda r: (r < 0, abs(r)))


def _span(ranks: list[int]) -> str:
    if not ranks:
        return "?"
    return str(ranks[0]) if len(ranks) == 1 else f"{ranks[0]}-{ranks[-1]}" if ranks[-1] - ranks[0] == len(ranks) - 1 \
        else ",".join(map(str, ranks[:8])) + (" ..." if len(ranks) > 8 else "")
