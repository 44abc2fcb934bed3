"""The NCCL path on one NVIDIA GPU: bf16 buffers, CUDA-event timing, world size 1, whole pipeline.

Run with `pytest -m gpu` on a machine with a GPU (the default run deselects these).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.helpers.ranks import read_json, run_cli

pytestmark = pytest.mark.gpu


def test_nccl_buffers_are_bf16_and_verify_on_the_gpu() -> None:
    import torch

    from preflight.probes import ops

    assert torch.cuda.is_available()
    buffers = ops.make_buffers("all_to_all", 1 << 20, 0, 1, torch.bfloat16, "cuda")
    assert buffers.send.dtype == torch.bfloat16 and buffers.send.is_cuda
    buffers.recv.copy_(buffers.send)
    assert ops.verify(buffers, 0, 1) == (True, [])


def test_whole_pipeline_on_one_gpu_with_nccl(tmp_path: Path) -> None:
    out = tmp_path / "gpu.json"
    proc = run_cli(["run", "--backend", "auto", "--ops", "all_reduce,all_gather,reduce_scatter,all_to_all,broadcast",
                    "--sizes", "1MiB,64MiB", "--json", str(out)], timeout=300)
    report = read_json(out)
    assert proc.returncode == 0, report["why"]
    assert not [f for f in report["findings"] if f["check_id"].startswith("BW")]
    probes = report["probes"]
    assert {p["op"] for p in probes} == {"all_reduce", "all_gather", "reduce_scatter", "all_to_all", "broadcast"}
    assert all(p["verified"] and p["time_s"] > 0 and p["algbw_gbps"] > 0 for p in probes)
    for p in probes:
        print(f"{p['op']:<15} {p['size_bytes']:>10} B  {p['time_s'] * 1e6:9.1f} us  algbw {p['algbw_gbps']:.1f} GB/s")
