"""`--exclude-file PATH`: the bad hosts, one per line, as Slurm's `--exclude=<file>` reads it."""

from __future__ import annotations

from pathlib import Path

from preflight.lib.files import ensure_parent
from preflight.lib.host_fault import retry_hosts
from preflight.model import JobReport

__all__ = ["render", "retry_hosts", "write", "write_retry"]


def render(report: JobReport) -> str:
    """One host per line; empty when no host is bad (so a resubmit excludes nothing)."""
    return "".join(f"{host}\n" for host in report.bad_hosts)


def write(report: JobReport, path: str) -> None:
    """Write the file, always: an empty file says "no bad host", a missing one says nothing."""
    target = Path(path)
    ensure_parent(target)
    target.write_text(render(report))


def write_retry(report: JobReport, path: str) -> None:
    """`--retry-exclude-file`: retry_hosts one per line; always written, empty when retrying cannot help."""
    target = Path(path)
    ensure_parent(target)
    target.write_text("".join(f"{host}\n" for host in retry_hosts(report)))
