"""A tiny trainer, run by torchrun in tests/test_api.py: DeviceMesh, preflight.check, one training step.

    python -m torch.distributed.run --nproc-per-node 4 tests/helpers/trainer.py OUT_DIR MODE

On a 2x2 dp x tp mesh. MODE `full`: each wrong call first, then preflight.check(mesh), then
preflight.check() (the world as one dimension, a second call in the same job); MODE `mesh`:
preflight.check(mesh), and when it fails once more with on_failure="warn"; MODE `hang`:
preflight.check(mesh) with a short probe deadline, then os._exit(3) when it says `stuck`, once
every rank's record is written (torchrun stops every worker when one exits non-zero).
Each rank writes OUT_DIR/rank-N.json: what each call did,
whether the process was left as found (TF32 set through the newer fp32_precision API, float32
matmul precision, intra/inter-op threads, torch's and Python's RNG, the Python threads running,
environment, SIGTERM/SIGINT handlers, log levels, process groups, frozen objects), and the
training step's result, which only a working default group and mesh groups give; it trains
only when every check passed.
"""

from __future__ import annotations

import gc
import hashlib
import json
import logging
import os
import random
import signal
import sys
import threading
import warnings
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
from torch.distributed.device_mesh import init_device_mesh

import preflight
from preflight.lib.torch_import import cpp_log_level
from preflight.lib.waiting import wait_until


def _matmul_precision() -> str:
    """torch's float32 matmul precision; with the new TF32 API set torch refuses the generic read (kept as is)."""
    try:
        return torch.get_float32_matmul_precision()
    except RuntimeError as exc:
        return f"refused: {str(exc)[:40]}"


def process_state() -> dict[str, Any]:
    """What preflight.check must leave as it found it."""
    return {
        "tf32": torch.backends.cuda.matmul.fp32_precision,  # the new API (torch >= 2.9), as the trainer set it
        "float32_matmul_precision": _matmul_precision(),
        "threads": [torch.get_num_threads(), torch.get_num_interop_threads()],
        "rng_torch": hashlib.sha256(bytes(torch.get_rng_state().tolist())).hexdigest(),
        "rng_python": hashlib.sha256(repr(random.getstate()).encode()).hexdigest(),
        "running_threads": sorted(t.name for t in threading.enumerate()),
        "env": dict(os.environ),
        "signals": [str(signal.getsignal(s)) for s in (signal.SIGTERM, signal.SIGINT)],
        "log_levels": [logging.getLogger(n).level for n in ("", "torch", "torch.distributed")],
        "cpp_log_level": cpp_log_level(),
        "process_groups": len(dist.distributed_c10d._world.pg_map),
        "frozen": gc.get_freeze_count(),
    }


def train_step(mesh: Any) -> float:
    """One data-parallel step: a linear model's gradients all_reduced over dp, then over the world."""
    torch.manual_seed(dist.get_rank())
    model = torch.nn.Linear(8, 1)
    loss = model(torch.ones(4, 8)).pow(2).mean()
    loss.backward()
    grad = model.weight.grad
    assert grad is not None
    if mesh is not None:
        dist.all_reduce(grad, group=mesh.get_group("dp"))
    dist.all_reduce(grad)  # the default group, right after preflight
    total = torch.tensor([float(dist.get_rank())])
    dist.all_reduce(total)
    return float(total.item())


def bad_calls(mesh: Any) -> list[str]:
    """Each wrong call's one-line error, as `Type: message`."""
    errors = []
    for call in (lambda: preflight.check("dp2,tp2"),  # type: ignore[arg-type]
                 lambda: preflight.check(mesh["tp"]),  # a slice: another world than the job's
                 lambda: preflight.check(mesh, timeout_s="60"),  # type: ignore[arg-type]
                 lambda: preflight.check(mesh, skip="probe"),  # type: ignore[arg-type]
                 lambda: preflight.check(mesh, on_failure="ignore"),  # type: ignore[arg-type]
                 lambda: preflight.check(mesh, skip=["nosuchtag"]),
                 lambda: preflight.check(mesh, probe_timeout_s=1e9),  # the CLI's bound, from the same RunOptions
                 lambda: preflight.check(mesh, device_budget_s="5"),  # type: ignore[arg-type]
                 lambda: preflight.check(mesh, storage="/nonexistent/ckpt")):
        try:
            call()
            errors.append("no error")
        except (TypeError, ValueError) as exc:
            errors.append(f"{type(exc).__name__}: {exc}")
    return errors


def checked(result: dict[str, Any], key: str, mesh: Any, out: Path, **options: Any) -> bool:
    """One preflight.check, its outcome under result[key]; True when it passed."""
    before = process_state()
    try:
        report = preflight.check(mesh, json=str(out / f"{key}.json"), quiet=True, **options)
        result[key] = {"outcome": "passed", "exit_code": report.exit_code}
    except preflight.PreflightFailed as failed:
        report = failed.report
        result[key] = {"outcome": "PreflightFailed", "message": str(failed), "exit_code": failed.report.exit_code,
                       "finding_ranks": {f.check_id: f.ranks for f in failed.report.findings},
                       "stuck": failed.stuck}
    choice = report.keep_hosts(1)  # spare nodes: which host(s) a trainer re-forming its mesh would keep
    result[key]["keep_one"] = {"chosen": choice.chosen, "kept": choice.kept, "why": choice.why}
    after = process_state()
    result[key]["changed"] = sorted(k for k in before if before[k] != after[k])
    result[key]["threads_left"] = sorted(set(after["running_threads"]) - set(before["running_threads"]))
    return bool(result[key]["outcome"] == "passed")


def record(out: Path, rank: int, result: dict[str, Any]) -> None:
    """This rank's record, written whole (renamed into place): a reader never sees half of one."""
    partial = out / f".rank-{rank}.json.partial"
    partial.write_text(json.dumps(result))
    os.replace(partial, out / f"rank-{rank}.json")


def main() -> None:
    out, mode = Path(sys.argv[1]), sys.argv[2]
    dist.init_process_group("gloo")
    mesh = init_device_mesh("cpu", (2, 2), mesh_dim_names=("dp", "tp"))
    torch.backends.cuda.matmul.fp32_precision = "tf32"  # a trainer on the newer TF32 API (legacy reads now raise)
    torch.set_num_threads(3)  # a trainer's own choice, which the CPU probes' one-thread products must not keep
    rank = dist.get_rank()
    result: dict[str, Any] = {"rank": rank}
    if mode == "full":
        result["errors"] = bad_calls(mesh)
    if mode == "hang":  # a planted probe hang: the job's groups cannot be used again, so leave at once
        checked(result, "mesh", mesh, out, probe_timeout_s=4.0, sizes="64KiB")
        record(out, rank, result)
        # torchrun's agent stops every worker as soon as one exits non-zero: the first rank to leave
        # with 3 would kill a rank still between its verdict and its record (a loaded node), which then
        # wrote none. So no rank leaves before every rank's record is written (bounded).
        wait_until(lambda: all((out / f"rank-{r}.json").exists() for r in range(dist.get_world_size())), 120.0)
        os._exit(3 if result["mesh"].get("stuck") else 0)
    passed = checked(result, "mesh", mesh, out)
    if not passed:  # the same fault again, as a warning: the call returns the report instead
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            report = preflight.check(mesh, quiet=True, on_failure="warn")
        result["warned"] = {"exit_code": report.exit_code,
                            "warnings": [w.category.__name__ for w in caught if "preflight" in str(w.message)]}
    if passed and mode == "full":
        passed = checked(result, "world", None, out)
    if passed:
        result["step"] = train_step(mesh)
    record(out, rank, result)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
