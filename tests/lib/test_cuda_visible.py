"""CUDA_VISIBLE_DEVICES and CUDA_DEVICE_ORDER resolved to GPUs by PCI bus id (lib/cuda_visible.py)."""

from __future__ import annotations

from preflight.lib.cuda_visible import NvmlGpu, Visible, cuda_order, resolve

# NVML's order is the bus order: index 0 (bus 18) a T4, 1-2 H100s; GPU 2 has two MIG instances.
T4 = NvmlGpu(0, "00000000:18:00.0", "GPU-aaaa0000", (7, 5))
H100_A = NvmlGpu(1, "00000000:2A:00.0", "GPU-bbbb0001", (9, 0))
H100_B = NvmlGpu(2, "00000000:3A:00.0", "GPU-bbbb0002", (9, 0), ("MIG-cccc0021", "MIG-cccc0022"))
MIXED = [H100_B, T4, H100_A]  # the order NVML's answers arrive in does not matter


def test_pci_bus_id_order_is_nvmls_and_fastest_first_puts_the_h100s_first() -> None:
    assert [g.index for g in cuda_order(MIXED, "PCI_BUS_ID")[0]] == [0, 1, 2]
    order, note = cuda_order(MIXED, None)
    assert [g.index for g in order] == [1, 2, 0] and "CUDA_DEVICE_ORDER=PCI_BUS_ID" in note
    same = [NvmlGpu(i, f"0000:{0x18 + i:02x}:00.0", f"GPU-{i}", (9, 0)) for i in (2, 0, 1)]
    assert cuda_order(same, None) == (sorted(same, key=lambda g: g.index), "")  # one model: no guess


def test_ordinals_count_in_cudas_order_and_name_gpus_by_bus_id() -> None:
    assert resolve("0", MIXED, None) == ([Visible(1, "00000000:2A:00.0")], resolve("0", MIXED, None)[1])
    assert resolve("0", MIXED, "PCI_BUS_ID") == ([Visible(0, "00000000:18:00.0")], "")
    assert [v.index for v in resolve("2,0", MIXED, "PCI_BUS_ID")[0]] == [2, 0]
    assert [v.index for v in resolve("1,5,0", MIXED, "PCI_BUS_ID")[0]] == [1]  # CUDA stops at the bad one


def test_uuids_and_mig_instances_are_named_as_what_they_are() -> None:
    assert resolve("GPU-aaaa", MIXED, None)[0] == [Visible(0, "00000000:18:00.0")]
    assert resolve("MIG-cccc0022", MIXED, None)[0] == [Visible(2, "00000000:3A:00.0", mig="MIG-cccc0022")]
    legacy = "MIG-GPU-bbbb0002/1/0"  # before R470: the GPU's UUID, GPU instance, compute instance
    assert resolve(legacy, MIXED, None)[0] == [Visible(2, "00000000:3A:00.0", mig=legacy)]
    chosen, note = resolve("GPU-bbbb", MIXED, "PCI_BUS_ID")  # a prefix two GPUs share
    assert chosen == [] and "names no single GPU" in note
    chosen, note = resolve("MIG-dddd", MIXED, "PCI_BUS_ID")
    assert chosen == [] and "'MIG-dddd' names no single GPU" in note  # never "GPU-MIG-..."


def test_two_models_of_one_compute_capability_are_a_guess_under_fastest_first() -> None:
    """CUDA documents FASTEST_FIRST only as "fastest to slowest order using a simple heuristic" (no rule given):
    an A100 beside an A30 (both 8.0) is not one model, so their order is said to be a guess, and PCI_BUS_ID is
    named as the fix; under PCI_BUS_ID (documented: ascending bus id) the order is certain."""
    a30 = NvmlGpu(0, "00000000:18:00.0", "GPU-a30", (8, 0), name="NVIDIA A30")
    a100 = NvmlGpu(1, "00000000:2A:00.0", "GPU-a100", (8, 0), name="NVIDIA A100-SXM4-80GB")
    order, note = cuda_order([a100, a30], "FASTEST_FIRST")
    assert [g.index for g in order] == [0, 1] and "heuristic it does not document" in note
    assert "CUDA_DEVICE_ORDER=PCI_BUS_ID" in note
    assert cuda_order([a100, a30], "PCI_BUS_ID") == ([a30, a100], "")
    twins = [NvmlGpu(i, f"0000:{0x18 + i:02x}:00.0", f"GPU-{i}", (8, 0), name="NVIDIA A100-SXM4-80GB") for i in (1, 0)]
    assert cuda_order(twins, None) == (sorted(twins, key=lambda g: g.index), "")  # one model: certain
    assert "not one CUDA knows" in cuda_order(twins, "SLOWEST_FIRST")[1]  # CUDA knows only the two values


def test_the_gatherer_reads_each_gpus_model_for_the_order(monkeypatch) -> None:
    """steps/gather/gpu_health.nvml_gpus gives cuda_visible the name NVML reads (the mixed T4/H100 replay)."""
    from pathlib import Path

    from preflight.lib import nvml_source
    from preflight.steps.gather.gpu_health import nvml_gpus

    fixture = Path(__file__).resolve().parents[1] / "fixtures" / "nvml" / "mixed_t4_h100.json"
    monkeypatch.setenv(nvml_source.REPLAY_VARIABLE, str(fixture))
    nvml, why = nvml_source.open_nvml(10.0)
    assert nvml is not None, why
    gpus = nvml_gpus(nvml)
    assert gpus[0].name == "Tesla T4" and gpus[1].name.startswith("NVIDIA H100")
