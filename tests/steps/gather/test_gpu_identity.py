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


@pytest.mark.parametrize("order", [None, "PCI_BUS_ID"])
@pytest.mark.parametrize("visible", ["0,1", "1,0", None, "GPU-5a1e0000-0000-4000-8000-000000000000,3"])
def test_the_facts_and_the_probes_name_the_same_gpu_by_bus_id(monkeypatch: pytest.MonkeyPatch, visible: str | None,
                                                                order: str | None) -> None:
    """LOCAL_RANK 1 of 2 on the mixed node: the health facts (NVML, this module's mapping) and the probes'
    binding (torch, here the CUDA model numbering the same node as CUDA does) must describe one GPU."""
    from preflight.model import World
    from preflight.probes.session import bind_device
    from tests.helpers.fake_cuda import FakeCuda, cuda_view, gpu

    node = [gpu(i, name="Tesla T4" if i == 0 else "NVIDIA H100 80GB HBM3") for i in range(8)]
    node[0]["capability"], node[0]["uuid"] = (7, 5), "5a1e0000-0000-4000-8000-000000000000"
    for i in range(1, 8):
        node[i]["uuid"] = f"5a1e0000-0000-4000-8000-00000000000{i}"
    if order is None:
        monkeypatch.delenv("CUDA_DEVICE_ORDER", raising=False)
    else:
        monkeypatch.setenv("CUDA_DEVICE_ORDER", order)
    facts = gathered(monkeypatch, "mixed_t4_h100", visible=visible, local_rank=1, local_world_size=2)
    world = World("env", 1, 2, local_rank=1, local_world_size=2, host="node01")
    bound = bind_device(world, FakeCuda(cuda_view(node, visible, order)))
    assert facts.health.gpus and facts.health.gpus[0].pci_bus_id == bound.pci_bus_id, (visible, order)
