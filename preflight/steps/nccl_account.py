"""After the probes, on rank 0: NCCL's account judged against the hardware (NCCL020-NCCL025), and the
transport NCCL used named in the slow-group findings.

Every rank sent its NcclAccount beside its probe report (probes/nccl_capture.py); the facts say
what each host has (active RDMA ports, NVLink, NVSwitch, its GPU model), which is what the
checks of checks/nccl_account.py compare NCCL's choices with.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from preflight.checks.localization_findings import slow_host, slow_host_group_tested, slow_link
from preflight.checks.nccl_account import ACCOUNT_CHECKS, NVSWITCH_LINKS, NcclJob, account_unavailable
from preflight.checks.probe_findings import below_expected, below_profile, cross_dim_suspect, straggler_group
from preflight.lib.nccl_summary import forget_grouping, group_transport
from preflight.model import Finding, RankFacts
from preflight.model.nccl_account import NcclAccount
from preflight.model.probe_outcome import ProbeOutcome

# The findings about slow groups, ranks, hosts and links: each says what carried its traffic.
SLOW_FINDINGS = (straggler_group, cross_dim_suspect, slow_host, slow_link, slow_host_group_tested, below_expected,
                 below_profile)


def job_from_facts(accounts: Mapping[int, NcclAccount], facts: Sequence[RankFacts],
                   strict_bandwidth: bool = False, hosts: dict[int, str] | None = None) -> NcclJob:
    """The accounts with what each host's facts say of its hardware.

    `hosts`: the rank -> host map the report's summary grouped the accounts by (ProbeOutcome.nccl_hosts);
    where it says what the facts say, the job holds that map and the accounts themselves (not copies), so
    the checks read the summary's grouping by host (lib/nccl_summary.by_host keeps it) instead of grouping
    131,072 ranks again."""
    of_facts = {f.rank: f.host for f in facts}
    if hosts is not None and hosts == of_facts:
        of_facts = hosts
    job = NcclJob(accounts if type(accounts) is dict else dict(accounts), of_facts,  # read-only from here on
                  strict_bandwidth=strict_bandwidth)
    seen: set[str] = set()
    for rank_facts in facts:  # a host's hardware as its first rank saw it (its ranks share the sections)
        host = rank_facts.host
        if host in seen:
            continue
        seen.add(host)
        active = [f"{p.device}:{p.port}" for p in rank_facts.network.ib_ports if p.state.upper().endswith("ACTIVE")]
        if active and host not in job.rdma_ports:
            job.rdma_ports[host] = active
        links = [g.nvlink_active for g in rank_facts.gpus]
        if any(links):
            job.nvlink_hosts.add(host)
        if any(n >= NVSWITCH_LINKS for n in links):
            job.nvswitch_hosts.add(host)
        if rank_facts.gpus and host not in job.gpu_models:
            job.gpu_models[host] = rank_facts.gpus[0].name
        if rank_facts.health.peermem is not None:
            job.peermem[host] = rank_facts.health.peermem
    return job


def judge(outcome: ProbeOutcome, facts: Sequence[RankFacts], strict_bandwidth: bool = False) -> list[Finding]:
    """NCCL020-NCCL025 for this run; names the transport in the outcome's slow-group findings."""
    if outcome.backend != "nccl":
        return []
    found: list[Finding] = []
    if outcome.nccl_missing:
        why = next(iter(sorted(outcome.nccl_missing.items())))[1]
        found += account_unavailable.report(why=why, ranks=sorted(outcome.nccl_missing))
    if outcome.nccl_accounts:
        job = job_from_facts(outcome.nccl_accounts, facts, strict_bandwidth, outcome.nccl_hosts)
        for check in ACCOUNT_CHECKS:
            found += check.report(job)
        forget_grouping()  # the summary (made before) and the checks have read it
        name_transports(outcome.findings, outcome.nccl_accounts, job.hosts)
    return found


def name_transports(findings: list[Finding], accounts: Mapping[int, NcclAccount],
                    hosts: Mapping[int, str] | None = None) -> None:
    """Add to each slow-group finding what NCCL carried its ranks' traffic over (data `nccl_transport`)."""
    ids = {check.id for check in SLOW_FINDINGS}
    for finding in findings:
        if finding.check_id not in ids or not finding.ranks:
            continue
        transport = group_transport(finding.ranks, accounts, hosts)
        if transport:
            finding.message += f"; NCCL ran it over {transport}"
            finding.data["nccl_transport"] = transport
