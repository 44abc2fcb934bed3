"""Versions that must agree across ranks: Python, torch and its CUDA / NCCL build, and the NCCL, cuDNN and
cuBLAS libraries the process actually mapped (lib/loaded_libraries.py: each asked through its own call)."""

from __future__ import annotations

import platform
from typing import TYPE_CHECKING

from preflight.lib import loaded_libraries
from preflight.model import RankFacts

if TYPE_CHECKING:
    from preflight.steps.gather import GatherOptions


def gather(facts: RankFacts, options: GatherOptions) -> None:
    """Fill facts.versions with python, torch, cuda, nccl and gloo availability, and the versions of the NCCL,
    cuDNN and cuBLAS libraries mapped into this process ("" for one not loaded, or that would not say)."""
    import torch
    import torch.distributed as dist

    versions = facts.versions
    versions.python = platform.python_version()
    versions.torch = str(torch.__version__)  # a TorchVersion (str subclass): plain text crosses the store
    versions.torch_cuda = str(torch.version.cuda or "")
    versions.gloo = "yes" if dist.is_gloo_available() else "no"
    versions.nccl_built = "yes" if dist.is_nccl_available() else "no"
    if dist.is_nccl_available():
        try:
            nccl = torch.cuda.nccl.version()
            versions.nccl = ".".join(str(part) for part in nccl) if isinstance(nccl, tuple) else str(nccl)
        except Exception as exc:  # a broken CUDA install is itself worth reporting
            versions.nccl = f"error: {exc}"
    # After torch's import: a CUDA build's libtorch_cuda has mapped the NCCL, cuDNN and cuBLAS it found.
    mapped = loaded_libraries.loaded()
    versions.libnccl, versions.libcudnn, versions.libcublas = (
        mapped[name].version if name in mapped else "" for name in ("nccl", "cudnn", "cublas"))
