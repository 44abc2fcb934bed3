"""The "kept / dropped and why" section of a report that carries a host choice (`--keep N`),
and `--hostfile PATH`: the kept hosts one per line (torchrun, mpirun, `srun --nodelist=<file>`)."""

from __future__ import annotations

from pathlib import Path

from preflight.lib.files import ensure_parent
from preflight.lib.hostlist import compress_hostlist
from preflight.model import HostChoice, JobReport


def nodelist(choice: HostChoice) -> str:
    """The kept hosts as one Slurm hostlist (`labh[2-3]`); "" when none were chosen."""
    return compress_hostlist(choice.kept) if choice.kept else ""


def lines(choice: HostChoice) -> list[str]:
    """The section as plain text lines: the verdict of the choice, then each host kept and dropped."""
    head = (f"hosts: keep {choice.keep}: {'chosen' if choice.chosen else 'NO CHOICE'}: "
            + (f"kept {nodelist(choice)}" if choice.chosen else choice.why))
    out = [head]
    out += [f"  kept    {host}" for host in choice.kept]
    out += [f"  dropped {dropped.host}: {dropped.why}" for dropped in choice.dropped]
    out += [f"  note: {note}" for note in choice.notes]
    return out


def render(report: JobReport) -> str:
    """The section of `report.host_choice` as text ("" when no choice was asked for)."""
    return "\n".join(lines(report.host_choice)) + "\n" if report.host_choice else ""


def write_hostfile(report: JobReport, path: str) -> None:
    """`--hostfile`: the kept hosts one per line, in job order; always written, empty without a choice."""
    target = Path(path)
    ensure_parent(target)
    choice = report.host_choice
    target.write_text("".join(f"{host}\n" for host in (choice.kept if choice else [])))
