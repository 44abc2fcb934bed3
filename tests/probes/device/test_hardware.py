"""The one hardware table: every row's torch and NVML names find that row (whole tokens), and only it."""

from __future__ import annotations

import pytest

from preflight.probes.device import hardware
from preflight.probes.device.hardware import SKUS, match

NAMES = [(sku.label, name) for sku in SKUS for name in (*sku.torch_names, *sku.nvml_names)]


@pytest.mark.parametrize(("label", "name"), NAMES)
def test_every_rows_torch_and_nvml_names_match_that_row(label: str, name: str) -> None:
    found = match(name)
    assert found.sku is not None and found.sku.label == label, found.why


def test_every_row_has_a_torch_name_and_every_nvidia_row_an_nvml_name() -> None:
    assert all(sku.torch_names for sku in SKUS)
    assert all(sku.nvml_names for sku in SKUS if not sku.label.startswith("MI"))
    assert len({sku.label for sku in SKUS}) == len(SKUS)


def test_gh200_is_not_an_h200_and_h200_nvl_has_its_own_row() -> None:
    assert match("NVIDIA GH200 480GB").sku.label == "GH200 96GB HBM3"  # type: ignore[union-attr]
    assert hardware.peak("copy", "NVIDIA GH200 480GB")[0] == 4000.0  # type: ignore[index]  (HBM3, not 4800)
    assert match("NVIDIA H200 NVL").sku.label == "H200 NVL"  # type: ignore[union-attr]
    assert match("NVIDIA H200").sku.label == "H200 SXM"  # type: ignore[union-attr]
    assert "more specific than H200 SXM" not in match("NVIDIA H200 NVL").why  # H200 SXM refuses "nvl"
    assert match("NVIDIA A10").sku.label == "A10" and match("NVIDIA A10G").sku is None  # type: ignore[union-attr]


@pytest.mark.parametrize("name", ["NVIDIA A100-SXM4-40GB MIG 3g.20gb", "NVIDIA H100 80GB HBM3 MIG 1g.10gb"])
def test_a_mig_slice_gets_no_whole_gpu_peak(name: str) -> None:
    found = match(name)
    assert found.sku is None and "MIG slice" in found.why
    assert hardware.peak("gemm_bf16", name) is None and hardware.peak("copy", name) is None


@pytest.mark.parametrize("name", ["NVIDIA Tesla V100-SXM2-32GB", "Quadro RTX 8000", "", "cpu"])
def test_an_unknown_device_gets_none(name: str) -> None:
    assert match(name).sku is None and hardware.peak("gemm_bf16", name) is None


def test_nvlink_line_rate_is_links_times_the_generations_rate() -> None:
    assert hardware.nvlink_line_gbps(hardware.find("NVIDIA H100 80GB HBM3")) == 450.0  # type: ignore[arg-type]
    assert hardware.nvlink_line_gbps(hardware.find("NVIDIA B200")) == 900.0  # type: ignore[arg-type]
    assert hardware.nvlink_line_gbps(hardware.find("NVIDIA L40S")) is None  # type: ignore[arg-type]
