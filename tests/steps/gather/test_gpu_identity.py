"""The bound GPU's identity end to end on a mixed node (NVML replay FAKE, tests/fixtures/nvml/mixed_t4_h100.json):
CUDA ordinals in CUDA's order, mapped to NVML by bus id; MIG instances named, whole-GPU checks not applied."""

from __future__ import annotations

import pytest

from preflight.checks import gpu_health as checks
from preflight.registry import CheckContext
from tests.steps.gather.test_gpu_health import gathered

MIG = "MIG-7a1e0000-0000-4000-8000-000000000072"


def _bound(facts) -> tuple[int | None, str, str]:  # type: ignore[no-untyped-def]
    gpu = facts.health.gpus[0] if facts.health.gpus else None
    return facts.health.bound_index, gpu.pci_bus_id if gpu else "", gpu.mig_instance if gpu else ""


def test_cuda_ordinal_0_on_a_mixed_node_is_the_fastest_gpu_not_nvml_index_0(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("CUDA_DEVICE_ORDER", raising=False)
    facts = gathered(monkeypatch, "mixed_t4_h100", visible="0")
    assert _bound(facts) == (1, "00000000:2A:00.0", "")
    assert "CUDA_DEVICE_ORDER=PCI_BUS_ID" in facts.health.bound_reason  # the order is CUDA's guess: said so
    monkeypatch.setenv("CUDA_DEVICE_ORDER", "PCI_BUS_ID")
    facts = gathered(monkeypatch, "mixed_t4_h100", visible="0")
    assert _bound(facts) == (0, "00000000:18:00.0", "") and facts.gpus[0].name == "Tesla T4"


def test_a_rank_bound_to_a_mig_instance_is_named_by_it_and_spared_whole_gpu_checks(
        monkeypatch: pytest.MonkeyPatch) -> None:
    facts = gathered(monkeypatch, "mixed_t4_h100", visible=MIG)
    assert _bound(facts) == (7, "00000000:DB:00.0", MIG)
    ctx = CheckContext()
    assert list(checks.mig_enabled(facts, ctx)) == []  # the job asked for a slice
    whole = gathered(monkeypatch, "mixed_t4_h100", visible="GPU-5a1e0000-0000-4000-8000-000000000007")
    (problem,) = checks.mig_enabled(whole, ctx)  # the whole GPU in MIG mode: still said
    assert "has MIG enabled" in problem.message and "MIG instance" not in problem.message
