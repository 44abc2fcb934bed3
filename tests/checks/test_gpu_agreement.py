"""The GPU cross checks' reading of a job (checks/gpu_agreement.py) at scale: what each finds is in
test_gpu_health.py (every fixture case) and test_health_multirank.py (a real run)."""

from __future__ import annotations

import pytest

from preflight.checks import gpu_agreement
from tests.checks.test_fabric import on
from tests.checks.test_gpu_health import gpu_findings
from tests.steps.gather.test_gpu_health import gathered


def test_the_cross_checks_group_a_jobs_ranks_by_host_once_and_a_healthy_host_costs_no_rank_reads(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """At 131,072 ranks each grouping is a sort and a pass (~0.15 s) and GPU031 read every rank's bound GPU
    on every host (0.65 s): the four checks now share one grouping, and a host whose GPUs agree is skipped."""
    ranks = [on(gathered(monkeypatch, "healthy_h100x8", str(r % 8)), r, f"hgx{r // 8}") for r in range(16)]
    groupings, bound_reads = [], []
    real_hosts, real_bound = gpu_agreement._hosts._compute, gpu_agreement._bound_gpu
    monkeypatch.setattr(gpu_agreement._hosts, "_compute", lambda job: groupings.append(1) or real_hosts(job))
    monkeypatch.setattr(gpu_agreement, "_bound_gpu", lambda facts: bound_reads.append(facts.rank) or real_bound(facts))
    gpu_agreement._hosts.forget()
    assert gpu_findings(ranks) == {}
    assert len(groupings) == 1
    assert sorted(bound_reads) == [0, 8]  # GPU032's kind of each host (its first rank); GPU031 read none
