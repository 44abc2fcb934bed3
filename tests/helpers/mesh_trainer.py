"""A trainer on the meshes real trainers build, run as env:// ranks by tests/test_api_meshes.py.

    RANK=r WORLD_SIZE=n MASTER_ADDR=... MASTER_PORT=... python tests/helpers/mesh_trainer.py OUT_DIR CASE[,CASE]

Each CASE (one after the other, in one job) builds its DeviceMesh the way a trainer does:
torchtitan's ParallelDims on CPU (its `world` mesh, its dense meshes with and without the
singleton axes that live on torch's `fake` backend, its flattened `loss` mesh),
DeviceMesh._unflatten / _flatten, plain init_device_mesh in 3-D and 4-D. It calls
preflight.check on the mesh, then takes a training step on the same groups: a linear
model's gradients all_reduced over every mesh axis of more than one rank, then over the
world. Each rank writes OUT_DIR/rank-N.json: by case, the call's outcome (or its error),
the mesh's axes and sizes, and the training step's result.
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
from torch.distributed.device_mesh import DeviceMesh, init_device_mesh

import preflight

_TITAN: dict[int, Any] = {}


def titan(world_size: int) -> Any:
    """torchtitan's ParallelDims on CPU (dp_shard 2 x tp, the rest 1), its meshes built as its trainer builds them.

    torchtitan takes its device type from the machine's accelerator, "cuda" when there is none
    (torchtitan/tools/utils.py); on this CPU machine its module's device_type is set to "cpu"
    so that init_device_mesh does not call into a CUDA-less torch. Nothing else is changed.
    Built once per job (a trainer builds its meshes once).
    """
    if world_size in _TITAN:
        return _TITAN[world_size]
    # torchtitan's trainer shards its model with its FSDP module; importing it (as the trainer
    # does) imports torch's FSDP, which registers the `fake` backend its singleton axes use.
    import torchtitan.distributed.fsdp  # noqa: F401
    from torchtitan.distributed import parallel_dims
    from torchtitan.distributed.parallel_dims import ParallelDims

    parallel_dims.device_type = "cpu"
    dims = ParallelDims(dp_replicate=1, dp_shard=2, cp=1, tp=world_size // 2, pp=1, ep=1, world_size=world_size)
    dims.build_mesh()
    _TITAN[world_size] = dims
    return dims


def titan_world(world_size: int) -> DeviceMesh:
    return titan(world_size).world_mesh


def titan_dense_singletons(world_size: int) -> DeviceMesh:
    """The dense mesh with its size-1 axes (pp, dp_replicate, cp on the fake backend)."""
    dims = titan(world_size)
    mesh = dims.get_optional_mesh(["pp", "dp_replicate", "dp_shard", "cp", "tp"], include_singleton_axes=True)
    assert mesh is not None and 1 in mesh.mesh.shape
    return mesh


def titan_dense_active(world_size: int) -> DeviceMesh:
    """The dense mesh of the enabled axes only."""
    mesh = titan(world_size).get_activated_mesh(["dp_replicate", "dp_shard", "cp", "tp"])
    assert mesh is not None and 1 not in mesh.mesh.shape
    return mesh


def titan_loss(world_size: int) -> DeviceMesh:
    """torchtitan's flattened `loss` mesh (batch x cp): a slice of the world when tp > 1."""
    return titan(world_size).get_mesh("loss")


def unflattened(world_size: int) -> DeviceMesh:
    """A 1-D world mesh unflattened into pp x dp x tp, its size-1 pp on the fake backend."""
    import torch.distributed.fsdp  # noqa: F401  (registers torch's `fake` backend, as in a trainer using FSDP)

    world = init_device_mesh("cpu", (world_size,), mesh_dim_names=("world",))
    return world._unflatten(0, (1, 2, world_size // 2), ("pp", "dp", "tp"), backend_override={"pp": "fake"})


def flattened(world_size: int) -> DeviceMesh:
    """A dp x tp mesh flattened into one axis over the whole world."""
    mesh = init_device_mesh("cpu", (2, world_size // 2), mesh_dim_names=("dp", "tp"))
    return mesh["dp", "tp"]._flatten("dp_tp")


def mesh_3d(world_size: int) -> DeviceMesh:
    return init_device_mesh("cpu", (2, 2, world_size // 4), mesh_dim_names=("pp", "dp", "tp"))


def mesh_4d(world_size: int) -> DeviceMesh:
    return init_device_mesh("cpu", (2, 2, 2, world_size // 8), mesh_dim_names=("pp", "dp", "cp", "tp"))


CASES: dict[str, Callable[[int], DeviceMesh]] = {
    "titan_world": titan_world, "titan_dense_singletons": titan_dense_singletons,
    "titan_dense_active": titan_dense_active, "titan_loss": titan_loss, "unflattened": unflattened,
    "flattened": flattened, "mesh_3d": mesh_3d, "mesh_4d": mesh_4d,
}


def train_step(mesh: DeviceMesh) -> dict[str, Any]:
    """One step: gradients all_reduced over each mesh axis of more than one rank (its own group), then the world."""
    torch.manual_seed(dist.get_rank())
    model = torch.nn.Linear(8, 1)
    model(torch.ones(4, 8)).pow(2).mean().backward()
    grad = model.weight.grad
    assert grad is not None
    names = mesh.mesh_dim_names or ()
    reduced = {}
    for axis, name in enumerate(names):
        if mesh.mesh.shape[axis] > 1:
            ones = torch.ones(1)
            dist.all_reduce(ones, group=mesh.get_group(name))
            dist.all_reduce(grad, group=mesh.get_group(name))
            reduced[name] = float(ones.item())  # the axis's size: its own group carried it
    total = torch.tensor([float(dist.get_rank())])
    dist.all_reduce(total)
    return {"axes": reduced, "world_sum": float(total.item())}


def check_then_train(mesh: DeviceMesh, out: Path, case: str) -> dict[str, Any]:
    """preflight.check on the mesh, then a training step on its groups; what happened."""
    result: dict[str, Any] = {"names": list(mesh.mesh_dim_names or ()), "shape": list(mesh.mesh.shape)}
    try:
        report = preflight.check(mesh, json=str(out / f"{case}.json"), quiet=True, sizes="256KiB", timeout_s=120,
                                 probe_timeout_s=60)
        result["outcome"] = "passed"
        result["exit_code"] = report.exit_code
    except preflight.PreflightFailed as failed:
        result["outcome"] = "PreflightFailed"
        result["message"] = str(failed)
    except (TypeError, ValueError) as exc:
        result["outcome"] = type(exc).__name__
        result["message"] = str(exc)
    if result["outcome"] in ("passed", "ValueError"):  # a refused mesh leaves the job's groups as they were
        result["step"] = train_step(mesh)
    return result


def main() -> None:
    out, cases = Path(sys.argv[1]), sys.argv[2].split(",")
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    result = {case: check_then_train(CASES[case](dist.get_world_size()), out, case) for case in cases}
    (out / f"rank-{rank}.json").write_text(json.dumps(result))
    dist.barrier()
    # Leave without tearing the groups down: with a _flatten'ed mesh, torch 2.13's teardown aborts
    # now and then ("terminate called without an active exception", 2 of 24 processes of a plain
    # torch script doing only init_device_mesh, _flatten, one all_reduce, destroy_process_group).
    sys.stdout.flush()
    os._exit(0)


if __name__ == "__main__":
    main()
