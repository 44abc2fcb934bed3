"""preflight.check inside a one-rank "trainer" on this machine's GPU, with the newer TF32 API set.

    python benchmarks/inprocess_device.py [--device-budget S]
    TRAINER_PRODUCT=1 python benchmarks/inprocess_device.py   # the trainer ran a product first

The trainer sets `torch.backends.cuda.matmul.fp32_precision = "tf32"` (torch >= 2.9; reading the
legacy allow_tf32 then raises), binds its GPU, holds some memory, and calls
preflight.check(only=["gpu-probe"]). Prints one line per property issue 31 asks to be left as
found: the TF32 setting, torch's reserved device memory (never more than before), pinned host
memory, threads, the current device, and
whether any device figure could not run (DEV009). Exit 0 when all hold, 1 otherwise. On a host
without CUDA it prints why and exits 2.
"""

from __future__ import annotations

import argparse
import os
import sys
import threading


def main() -> int:
    """Run the check once and compare the process before and after."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device-budget", type=float, default=2.0)
    args = parser.parse_args()
    import torch
    import torch.distributed as dist

    import preflight

    if not torch.cuda.is_available():
        print("inprocess_device.py needs a GPU: torch sees no CUDA device (run it on the device machine)",
              file=sys.stderr)
        return 2
    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    os.environ.setdefault("MASTER_PORT", "29531")
    local = int(os.environ.get("LOCAL_RANK", "0"))
    torch.cuda.set_device(local)
    dist.init_process_group("nccl", rank=0, world_size=1, device_id=torch.device("cuda", local))
    matmul = torch.backends.cuda.matmul
    new_api = hasattr(matmul, "fp32_precision")
    if new_api:
        matmul.fp32_precision = "tf32"
    held = torch.empty(256 * 2**20, dtype=torch.uint8, device=torch.device("cuda", local))  # the trainer's memory
    if os.environ.get("TRAINER_PRODUCT", "0") == "1":  # a trainer that ran a product (its cuBLAS workspace made)
        weight = torch.randn(1024, 1024, device=torch.device("cuda", local))
        (weight @ weight).sum().item()

    def pinned() -> int:  # pinned host bytes torch's host caching allocator owns (active and cached)
        stats = getattr(torch.cuda, "host_memory_stats", None)
        return int(stats().get("allocated_bytes.current", -1)) if stats else -1

    before = {"tf32": matmul.fp32_precision if new_api else matmul.allow_tf32,
              "reserved": torch.cuda.memory_reserved(local), "pinned": pinned(),
              "threads": {t.name for t in threading.enumerate()}, "current_device": torch.cuda.current_device()}
    report = preflight.check(only=["gpu-probe"], device_budget_s=args.device_budget, quiet=True, on_failure="return")
    after = {"tf32": matmul.fp32_precision if new_api else matmul.allow_tf32,
             "reserved": torch.cuda.memory_reserved(local), "pinned": pinned(),
             "threads": {t.name for t in threading.enumerate()}, "current_device": torch.cuda.current_device()}
    dev009 = [f.message for f in report.findings if f.check_id == "DEV009"]
    ok = True
    for key in before:
        # Memory may drop, never grow: the family gives back torch's cuBLAS workspaces, the trainer's too
        # (made again at its next product, as after a CUDA graph capture), and the host cache's pinned blocks.
        same = after[key] <= before[key] if key in ("reserved", "pinned") else before[key] == after[key]
        ok &= same
        print(f"{key}: before {before[key]!r} after {after[key]!r} {'same' if same else 'CHANGED'}")
    print(f"DEV009: {dev009 or 'none'}; exit code {report.exit_code}")
    del held
    dist.destroy_process_group()
    return 0 if ok and not dev009 else 1


if __name__ == "__main__":
    sys.exit(main())
