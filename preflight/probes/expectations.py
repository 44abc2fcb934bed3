"""Expectations per hardware: what busbw a group should reach when the user wrote no --expect.

Each group's path is read from the facts (probes/nominal.py does the reading): a group inside
one host whose GPUs all have active NVLinks runs over NVLink, and its profile is chosen by
GPU model, NVLink generation and active link count; a group across hosts on NCCL runs over the
RDMA ports NCCL uses (ACTIVE, NCCL_IB_HCA), and its profile is chosen by their InfiniBand rate.
A profile's expectation is a fraction of the path's nominal (line) rate; the figures and
their sources are in docs/expectations.md. The 0.9 margin of --expect (judge.EXPECT_FRACTION)
applies on top, as it does to --expect.

A profile applies to the ring-like ops (all_reduce, all_gather, reduce_scatter), whose busbw
approaches the link rate at large sizes, and only at PROFILE_MIN_BYTES and above: smaller
messages measure latency. On gloo (CPU, TCP) no profile applies and none is invented; RoCE
and Ethernet have none either (their efficiency depends on the fabric's configuration).
Precedence per dimension: --expect, then a profile, then none; every result records which
(ProbeResult.expected_source), so the report says per figure where its expectation came from.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from msgspec import Struct

from preflight.checks.probe_findings import below_expected, below_profile
from preflight.model import Finding, ProbeResult, RankFacts
from preflight.probes.device import hardware
from preflight.probes.judge import EXPECT_FRACTION, largest
from preflight.probes.nominal import device_of, nccl_ports, nvlink_of

PROFILE_OPS = ("all_reduce", "all_gather", "reduce_scatter")
PROFILE_MIN_BYTES = 256 << 20  # the GPU default's largest size: where nccl-tests' busbw has flattened
EXPLICIT = "--expect"


class Profile(Struct, frozen=True):
    """One row of the shipped table (docs/expectations.md): a path, its line rate and the fraction expected."""

    name: str
    line_gbps: float  # nominal, one direction, GB/s (1e9 B/s)
    fraction: float  # of the line rate that a healthy path reaches in nccl-tests' busbw at large sizes

    @property
    def expected_gbps(self) -> float:
        """The busbw a healthy path of this kind reaches."""
        return round(self.line_gbps * self.fraction, 1)


# NVLink generation -> the effective busbw NVIDIA and nccl-tests report at large sizes over the
# line rate: NVLink4 (H100/H200 SXM, 18 links) ~370 of 450 GB/s, NVLink3 (A100 SXM, 12 links)
# ~230 of 300 GB/s. A generation without a published figure (NVLink5) gets no profile. The
# board's NVLink (generation, links) and line rate come from the one hardware table, by NVML's
# name matched on whole tokens (device/hardware.py).
NVLINK_EFFICIENCY = {3: 0.77, 4: 0.82}
# InfiniBand rate of the ports NCCL uses (Gb/s, per NIC) -> profile: ~92% of line rate.
RDMA_PROFILES: dict[float, Profile] = {
    400.0: Profile("InfiniBand NDR 400 Gb/s per NIC", 50.0, 0.92),
    200.0: Profile("InfiniBand HDR 200 Gb/s per NIC", 25.0, 0.92),
    100.0: Profile("InfiniBand EDR 100 Gb/s per NIC", 12.5, 0.92),
}


def _nvlink_profile(facts: RankFacts, device_id: str) -> Profile | None:
    gpu = device_of(facts, device_id)
    if gpu is None or nvlink_of(facts, device_id) is None:
        return None
    sku = hardware.find(gpu.name)
    if sku is None or sku.nvlink is None or sku.nvlink[0] not in NVLINK_EFFICIENCY:
        return None
    generation, links = sku.nvlink
    line = hardware.nvlink_line_gbps(sku)
    if line is None or gpu.nvlink_version != generation or gpu.nvlink_active < links:
        return None  # fewer links up than the board has: no healthy profile (nominal says how many)
    return Profile(f"{sku.needs[0].upper()} SXM NVLink{generation} x{links}", line, NVLINK_EFFICIENCY[generation])


def _rdma_profile(facts: RankFacts) -> Profile | None:
    ports = [p for p in nccl_ports(facts) if p.link_layer in ("", "InfiniBand") and p.rate_gbps]
    if not ports:
        return None
    best = max(ports, key=lambda p: p.rate_gbps or 0.0)
    return RDMA_PROFILES.get(float(best.rate_gbps or 0.0))


def profile_for(ranks: Sequence[int], facts_by_rank: Mapping[int, RankFacts], devices: Mapping[int, str],
                backend: str) -> Profile | None:
    """The profile of a group's path, or None: every member must have one, and the lowest bounds the group."""
    if backend != "nccl":
        return None
    members = [facts_by_rank.get(r) for r in ranks]
    if len(members) < 2 or any(m is None for m in members):
        return None
    same_host = len({m.host for m in members if m}) == 1
    found = [_nvlink_profile(m, devices.get(m.rank, "")) if same_host else _rdma_profile(m) for m in members if m]
    if any(p is None for p in found):
        return None
    return min((p for p in found if p is not None), key=lambda p: p.expected_gbps)


def assign(results: list[ProbeResult], facts: Sequence[RankFacts], devices: Mapping[int, str] | None,
           backend: str, explicit: Mapping[str, float]) -> None:
    """Set expected_gbps / expected_source on every result: --expect, else a profile, else none."""
    by_rank = {f.rank: f for f in facts}
    cache: dict[tuple[int, ...], Profile | None] = {}
    for r in results:
        if r.dim in explicit:
            r.expected_gbps, r.expected_source = float(explicit[r.dim]), EXPLICIT
            continue
        if r.op not in PROFILE_OPS or r.size_bytes < PROFILE_MIN_BYTES:
            continue
        key = tuple(r.ranks)
        if key not in cache:
            cache[key] = profile_for(r.ranks, by_rank, devices or {}, backend)
        profile = cache[key]
        if profile is not None:
            r.expected_gbps, r.expected_source = profile.expected_gbps, f"profile {profile.name}"


def profile_findings(results: list[ProbeResult], *, strict: bool) -> list[Finding]:
    """Groups at the largest size below EXPECT_FRACTION x their profile: BW011, or BW007 with --strict-bandwidth.

    --expect dimensions are judged where the probes ran (orchestrate, BW007); this judges profiles only.
    """
    out: list[Finding] = []
    for r in largest(results):
        if r.expected_gbps is None or r.expected_source == EXPLICIT:
            continue
        if r.busbw_gbps < EXPECT_FRACTION * r.expected_gbps:
            check = below_expected if strict else below_profile
            out += check.report(r, expected_gbps=r.expected_gbps, source=r.expected_source)
    return out


def judge_profiles(results: list[ProbeResult], facts: Sequence[RankFacts], devices: Mapping[int, str] | None,
                   backend: str, explicit: Mapping[str, float], *, strict: bool) -> list[Finding]:
    """Rank 0, once the facts are in: assign every result its expectation and judge the profiled ones."""
    assign(results, facts, devices, backend, explicit)
    return profile_findings(results, strict=strict)
