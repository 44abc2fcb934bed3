"""NCCL's account, the section every renderer shows when the probes ran on NCCL: what carried each
mesh dimension, then a row per host profile (hosts whose NCCL said the same).

Dimension x transport, in NCCL's words (`P2P/CUMEM`, `NET/IB/GDRDMA; NET/Socket on host b`);
profile x NCCL version, network (the plugin's name where one loaded), GPUDirect RDMA, NICs,
intra- and inter-host transports, NCCL's reason where the network is Socket or GDR is off, and its
first warnings. From JobReport.nccl (lib/nccl_summary.py).
"""

from __future__ import annotations

from preflight.model import JobReport
from preflight.model.nccl_account import NcclSummary

TITLE = "NCCL's account: what NCCL chose, from its own log"
DIM_HEADERS = ["dimension", "groups", "on one host", "transport (NCCL)"]
HEADERS = ["hosts", "ranks", "NCCL", "network", "GDR", "NICs", "intra-host", "inter-host", "why / NCCL WARN"]
MAX_HOSTS_SHOWN = 4


def _hosts(hosts: list[str]) -> str:
    shown = ", ".join(hosts[:MAX_HOSTS_SHOWN])
    return shown + (f" (+{len(hosts) - MAX_HOSTS_SHOWN})" if len(hosts) > MAX_HOSTS_SHOWN else "")


def dim_rows(report: JobReport) -> list[list[str]]:
    """Each mesh dimension's groups and what NCCL carried them over; [] without an account. A job of one
    rank connects nothing (NCCL logs no channel): said so, where "?" would read as a log that said nothing."""
    if report.nccl is None:
        return []
    nothing = "none: one rank" if report.meta.world_size == 1 else "?"
    return [[d.dim, str(d.groups), str(d.intra_host_groups), "; ".join(d.transports) or nothing]
            for d in report.nccl.dims]


def rows(report: JobReport) -> list[list[str]]:
    """A row per host profile, largest first; [] without an account."""
    if report.nccl is None:
        return []
    out = []
    for profile in report.nccl.profiles:
        a = profile.account
        network = a.network + (f" (plugin {a.plugin})" if a.plugin and a.plugin != a.network else "")
        why = "; ".join([a.reason] * bool(a.reason) + [f"WARN {w}" for w in a.warnings[:2]])
        out.append([_hosts(profile.hosts), str(profile.ranks), a.nccl_version or "?", network or "?",
                    {True: "on", False: "OFF", None: "?"}[a.gdr], ", ".join(a.nics[:4]) or "-",
                    ", ".join(a.intra) or "-", ", ".join(a.inter) or "-", why or "-"])
    return out


def summary(section: NcclSummary) -> str:
    """`read from 16 rank(s) (captured); 2 rank(s) without an account`."""
    line = f"read from {section.ranks_read} rank(s) ({section.source or 'no log'})"
    if section.ranks_unavailable:
        line += f"; {section.ranks_unavailable} rank(s) without an account (NCCL025)"
    return line


def summary_line(report: JobReport) -> str:
    """The line under the tables ("" without an account)."""
    return summary(report.nccl) if report.nccl is not None else ""
