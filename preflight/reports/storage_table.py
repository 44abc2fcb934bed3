"""The storage section every renderer shows (--storage): a row per host, then the job's aggregate.

Host x figure: the mount holding PATH there (type, source, the directory mounted), whether it
saw rank 0's file, its write and read rates (GB/s, its ranks at once; "a -> b" where the
confirming pass measured it again), the free bytes and inodes. Under it: the aggregate rates and
one save and one restore of --checkpoint-size projected at them.
"""

from __future__ import annotations

from preflight.lib.units import count, human_bytes
from preflight.model import JobReport
from preflight.model.storage import StorageHost, StorageSection

TITLE = "storage: the checkpoint path on every host"
HEADERS = ["host", "ranks", "mount", "sees rank 0's file", "write GB/s", "read GB/s", "free", "free inodes"]


def _rate(first: float | None, again: float | None) -> str:
    if first is None:
        return "none"
    return f"{first:.3g} -> {again:.3g}" if again is not None else f"{first:.3g}"


def _ranks(ranks: list[int]) -> str:
    return ",".join(str(r) for r in ranks[:8]) + (f" (+{len(ranks) - 8})" if len(ranks) > 8 else "")


def host_row(host: StorageHost) -> list[str]:
    """One host's cells, as HEADERS names them."""
    sees = "yes" if host.sees else "NO" if len(host.blind_ranks) >= len(host.ranks) else (
        f"NO: rank(s) {_ranks(host.blind_ranks)}")
    return [host.host, _ranks(host.ranks), host.mount.where(), sees,
            _rate(host.write_gbps, host.write_again_gbps), _rate(host.read_gbps, host.read_again_gbps),
            human_bytes(host.free_bytes), "no limit" if host.free_inodes < 0 else count(host.free_inodes)]


def rows(report: JobReport) -> list[list[str]]:
    """Every host's row; [] when the family did not run."""
    return [host_row(h) for h in report.storage.hosts] if report.storage is not None else []


def summary(section: StorageSection) -> str:
    """`/ckpt: 16 MiB per rank, 2 passes in 1.9 s; aggregate write 1.2 GB/s, read 3.4 GB/s; one save of
    800 GiB ~ 12 min, one restore ~ 4 min`."""
    parts = [f"{section.path}: {human_bytes(section.share_bytes)} per rank, {section.passes} pass(es) in "
             f"{section.seconds:.1f} s"]
    rates = [f"{name} {value:.3g} GB/s" for name, value in (("write", section.write_gbps), ("read", section.read_gbps))
             if value is not None]
    if rates:
        parts.append("aggregate " + ", ".join(rates))
    if section.read_back:
        parts.append(f"read back {section.read_back}")
    if section.checkpoint_size is not None and section.save_s is not None and section.restore_s is not None:
        parts.append(f"one save of {human_bytes(section.checkpoint_size)} ~ {_duration(section.save_s)}, "
                     f"one restore ~ {_duration(section.restore_s)}")
    return "; ".join(parts)


def summary_line(report: JobReport) -> str:
    """The line under the table ("" when the family did not run)."""
    return summary(report.storage) if report.storage is not None else ""


def _duration(seconds: float) -> str:
    if seconds < 120:
        return f"{seconds:.3g} s"
    if seconds < 7200:
        return f"{seconds / 60:.3g} min"
    return f"{seconds / 3600:.3g} h"
