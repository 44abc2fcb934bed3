"""preflight/probes/orchestrate.py: the backend findings rank 0 adds after the probes (BW010)."""

from __future__ import annotations

from preflight.model import GpuFacts
from preflight.probes.orchestrate import ProbeOutcome, backend_findings
from tests.helpers.facts import cluster

GPU = GpuFacts(index=0, name="NVIDIA H100 80GB HBM3", uuid="GPU-1", pci_bus_id="00000000:18:00.0")
WHY = "auto: 1 of 4 rank(s) cannot use a GPU, e.g. rank 2 on node002: device 0 failed: GPU is lost"


def test_a_gpu_job_that_auto_probed_on_gloo_is_a_warning_saying_why() -> None:
    facts = cluster(2, 2, gpus=[GPU])
    [finding] = backend_findings(ProbeOutcome(backend="gloo", backend_reason=WHY), "auto", facts)
    assert finding.check_id == "BW010" and finding.severity == "warn"
    assert finding.hosts == ["node001", "node002"] and "rank 2 on node002" in finding.message


def test_no_warning_on_nccl_on_an_explicit_gloo_or_without_gpus() -> None:
    gpu_hosts, cpu_hosts = cluster(2, 2, gpus=[GPU]), cluster(2, 2)
    assert backend_findings(ProbeOutcome(backend="nccl"), "auto", gpu_hosts) == []
    assert backend_findings(ProbeOutcome(backend="gloo", backend_reason="--backend gloo"), "gloo", gpu_hosts) == []
    assert backend_findings(ProbeOutcome(backend="gloo", backend_reason=WHY), "auto", cpu_hosts) == []
