"""NCCL transport switches that silently slow a job down: IB, P2P, SHM, GPUDirect RDMA."""

from __future__ import annotations

from collections.abc import Iterable

from preflight.model import RankFacts, Severity
from preflight.registry import LOCAL, CheckContext, Problem, Tags, check

GDR_LEVELS = ("LOC", "PIX", "PXB", "PHB", "SYS")


def ib_devices(facts: RankFacts) -> list[str]:
    """This host's RDMA device of each port; empty when none were found."""
    return [port.device for port in facts.network.ib_ports]


def _enabled(value: str | None) -> bool:
    return value is not None and value.strip() not in ("", "0")


@check(
    "NCCL011",
    tag=Tags.NCCL,
    scope=LOCAL,
    severity=Severity.WARN,
    hint="Unset NCCL_IB_DISABLE on hosts with InfiniBand/RoCE, unless you mean to run over TCP.",
)
def ib_disabled_with_devices(facts: RankFacts, ctx: CheckContext) -> Iterable[Problem]:
    """NCCL_IB_DISABLE=1 on a host that has InfiniBand / RoCE devices.

    NCCL then moves inter-node traffic to TCP sockets: collectives run at a fraction of the
    fabric's bandwidth and nothing fails. Often a leftover from debugging or a container default.
    """
    devices = ib_devices(facts)
    if devices and _enabled(facts.env.get("NCCL_IB_DISABLE")):
        yield Problem(f"NCCL_IB_DISABLE={facts.env['NCCL_IB_DISABLE']} although this host has "
                      f"{len(devices)} RDMA device(s) ({', '.join(devices[:4])})",
                      ranks=[facts.rank], hosts=[facts.host], data={"ib_devices": devices})


@check(
    "NCCL012",
    tag=Tags.NCCL,
    scope=LOCAL,
    severity=Severity.WARN,
    hint="Unset NCCL_P2P_DISABLE / NCCL_SHM_DISABLE unless a known hardware bug requires them.",
)
def transport_disabled(facts: RankFacts, ctx: CheckContext) -> Iterable[Problem]:
    """NCCL_P2P_DISABLE or NCCL_SHM_DISABLE is set.

    P2P (NVLink / PCIe peer access) and SHM are NCCL's intra-node transports. Disabling them
    routes traffic between GPUs of one host through host memory or the network: intra-node
    bandwidth drops several-fold without an error.
    """
    for name in ("NCCL_P2P_DISABLE", "NCCL_SHM_DISABLE"):
        value = facts.env.get(name)
        if _enabled(value):
            yield Problem(f"{name}={value}: intra-node transport disabled", ranks=[facts.rank],
                          hosts=[facts.host], data={"variable": name})


def valid_gdr_level(value: str) -> bool:
    """LOC, PIX, PXB, PHB, SYS (any case) or a legacy integer 0-5."""
    text = value.strip()
    return text.upper() in GDR_LEVELS or (text.isdigit() and int(text) <= 5)


@check(
    "NCCL013",
    tag=Tags.NCCL,
    scope=LOCAL,
    severity=Severity.WARN,
    hint="Use one of LOC, PIX, PXB, PHB, SYS (or unset it to let NCCL pick from the topology).",
)
def gdr_level_invalid(facts: RankFacts, ctx: CheckContext) -> Iterable[Problem]:
    """NCCL_NET_GDR_LEVEL (or the legacy NCCL_IB_GDR_LEVEL) is not a valid level.

    The level bounds how far apart NIC and GPU may be for GPUDirect RDMA: LOC, PIX, PXB,
    PHB, SYS, or the legacy integers 0-5. NCCL ignores an unknown value with at most a
    warning in its debug log, so the setting someone made on purpose has no effect.
    """
    for name in ("NCCL_NET_GDR_LEVEL", "NCCL_IB_GDR_LEVEL"):
        value = facts.env.get(name)
        if value is not None and not valid_gdr_level(value):
            yield Problem(f"{name}={value!r} is not a valid level ({', '.join(GDR_LEVELS)})",
                          ranks=[facts.rank], hosts=[facts.host], data={"variable": name})
