"""`preflight.check(mesh)`: the nine steps inside a running training job, on its own groups.

The second front door beside the CLI (which runs the same steps as `srun preflight`, in
processes of their own). Called on every rank right after the job built its DeviceMesh:

    mesh = init_device_mesh("cuda", (pp, dp, tp), mesh_dim_names=("pp", "dp", "tp"))
    preflight.check(mesh)          # raises preflight.PreflightFailed on a failing verdict

What it uses of the job, as it is: the default process group's c10d store for the exchange
(no second port, its timeout untouched), the mesh's own groups for the probes (one per
dimension, never rebuilt; the default group for the world's all_reduce), the job's backend
and the device the job bound. Without a mesh the world is one dimension. What it leaves as
it found it: no process group made and kept (a gloo control group for an NCCL job is made
and destroyed), the environment, SIGTERM/SIGINT handlers (installed for the call only, so a
launcher's stop still ends in a report), the C++ log level and the garbage collector's
frozen set. After a probe that hung the job's groups hold a pending collective and cannot
be used or torn down: PreflightFailed.stuck is True, and the trainer should leave by
os._exit (docs/api.md).
"""

from __future__ import annotations

import gc
import inspect
import itertools
import os
import warnings
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, Literal

from msgspec.structs import replace

from preflight.checks.probe_findings import probe_hang
from preflight.lib.collector import collector_paused
from preflight.lib.errors import BadInput
from preflight.lib.interrupts import interrupts_raised
from preflight.lib.mesh_shape import KNOWN_NAMES, WORLD_DIM, MeshDim, dim_groups
from preflight.lib.process_state import left_as_found
from preflight.model import ExitCode, JobReport
from preflight.model.job_groups import JobGroups
from preflight.options import API_OPTIONS, RunOptions
from preflight.runner import run_in_job
from preflight.steps.launchers import resolve_world
from preflight.steps.verdict import RunRecord, build_report

if TYPE_CHECKING:
    from torch.distributed.device_mesh import DeviceMesh

OnFailure = Literal["raise", "warn", "return"]
ON_FAILURE = ("raise", "warn", "return")
_calls = itertools.count(1)  # every rank calls check in the same order: the n-th call's keys are the n-th's


class PreflightFailed(RuntimeError):
    """The verdict failed (exit code not 0); the same exception, with the same report, on every rank.

    report: rank 0's JobReport (findings, probes, verdict; the per-rank facts stay in rank 0's
    report files). stuck: a probe hung in the job's own groups, which cannot be used again.
    """

    def __init__(self, report: JobReport, stuck: bool = False) -> None:
        self.report = report
        self.stuck = stuck
        super().__init__(f"preflight: {report.verdict} (exit {report.exit_code}): {report.why}")


class PreflightWarning(UserWarning):
    """A failing verdict under on_failure="warn"."""


def check(mesh: DeviceMesh | None = None, *, on_failure: OnFailure = "raise", **options: Any) -> JobReport:
    """Run preflight's steps on this job's own process groups; call it on every rank. Returns the JobReport.

    mesh: the job's DeviceMesh over the whole world (init_device_mesh's row-major layout; built
    by _unflatten / _flatten too, size-1 axes on torch's `fake` backend allowed), or None for
    the world as one dimension; a 1-D mesh named `world` (torchtitan's ParallelDims.world_mesh)
    is the world. The other keywords are the CLI's flags, from the options table (listed below and
    in `inspect.signature(preflight.check)`; rank 0 writes the report files). on_failure: "raise"
    PreflightFailed on every rank, "warn" a PreflightWarning and return, "return" the report
    silently (its exit_code says).
    A call that is wrong on its face (no process group, a mesh of another world, a keyword of
    the wrong type or value) raises RuntimeError, TypeError or ValueError on that rank before
    any rank waits for another.
    """
    import torch.distributed as dist

    if not (dist.is_available() and dist.is_initialized()):
        raise RuntimeError("preflight.check: torch.distributed has no default process group; "
                           "call init_process_group (or init_device_mesh) first")
    if on_failure not in ON_FAILURE:
        raise ValueError(f"preflight.check: on_failure={on_failure!r}: one of {', '.join(ON_FAILURE)}")
    unknown = sorted(set(options) - {option.name for option in API_OPTIONS})
    if unknown:
        raise TypeError(f"preflight.check() got an unexpected keyword argument {unknown[0]!r}")
    world_size, rank = dist.get_world_size(), dist.get_rank()
    dims = _mesh_dims(mesh, world_size)
    backend, device = _backend_and_device(mesh, dist.get_backend())
    try:
        # The keywords are validated where they enter, by RunOptions itself (as the CLI's flags are).
        run_options = RunOptions.build(**options, backend=backend, command_line=f"preflight.check({_mesh_repr(dims)})")
        run_options = replace(run_options, probes=replace(run_options.probes, mesh=dims, world_size=world_size))
        world = resolve_world(os.environ)
    except TypeError as exc:  # BadOptionType: a keyword of the wrong type
        raise TypeError(f"preflight.check: {exc}") from None
    except BadInput as exc:
        raise ValueError(f"preflight.check: {exc}") from None
    if (world.rank, world.world_size) != (rank, world_size):
        world.decisions.append(f"rank {rank} of {world_size} from the default process group "
                               f"(the launcher's variables said {world.rank} of {world.world_size})")
        world.rank, world.world_size = rank, world_size
    world.run_id = f"check-{next(_calls)}"  # the default store is this job's (and attempt's) alone
    # The store is up and the job's: preflight hosts none, so MASTER_PORT being held (by the
    # job itself) is no finding, as under torchrun's agent.
    world.use_agent_store = True
    groups = _job_groups(mesh, dims, backend, device, rank, world_size)
    frozen = gc.get_freeze_count()
    try:
        with interrupts_raised(), left_as_found(), collector_paused():  # no full collection of the trainer's heap
            code, record = run_in_job(run_options, world, dist.distributed_c10d._get_default_store(), groups)
    except BadInput as exc:  # rank 0 cannot write a report it was asked for (the others time out waiting for it)
        raise ValueError(f"preflight.check: {exc}") from None
    finally:
        if frozen == 0:
            gc.unfreeze()  # rank 0 freezes the payloads it decoded; the job's own objects stay collectable
    report = record.report or _alone(record, code)
    # The same on every rank: this rank's own collective never finished, or rank 0 found a hang
    # (a rank whose own steps finished may share a communicator with one that did not).
    stuck = (record.probes is not None and record.probes.left_pending) or any(
        f.check_id == probe_hang.id for f in report.findings)
    if report.exit_code == int(ExitCode.PASSED) and not stuck:
        return report
    if on_failure == "raise":
        raise PreflightFailed(report, stuck)
    if on_failure == "warn":
        warnings.warn(str(PreflightFailed(report, stuck)), PreflightWarning, stacklevel=2)
    return report


def _alone(record: RunRecord, code: int) -> JobReport:
    """This rank's own report when rank 0's never arrived: never a pass."""
    report = build_report(record)
    if report.exit_code == int(ExitCode.PASSED):
        report.exit_code, report.verdict = code or int(ExitCode.INCOMPLETE), "incomplete"
    return report


def _mesh_dims(mesh: Any, world_size: int) -> list[MeshDim]:
    """The mesh's dimensions, outermost first; [] without a mesh or for the world's own 1-D mesh.

    A 1-D mesh named `world` over every rank (torchtitan's ParallelDims.world_mesh) is the world:
    the same as no mesh. Size-1 axes (torchtitan's disabled dimensions, on torch's `fake`
    backend) are kept as the job named them; the probes skip them (nothing moves in a group of
    one). ValueError, saying what to pass instead, for a mesh preflight cannot use.
    """
    from torch.distributed.device_mesh import DeviceMesh

    if mesh is None:
        return []
    if not isinstance(mesh, DeviceMesh):
        raise TypeError(f"preflight.check: mesh must be a torch DeviceMesh or None, not {type(mesh).__name__}")
    ranks = mesh.mesh.flatten().tolist()
    if ranks != list(range(world_size)):
        raise ValueError(f"preflight.check: the mesh holds ranks {_short(ranks)}, the default process group "
                         f"0..{world_size - 1}: pass the job's whole mesh, not a slice of it (the mesh "
                         "init_device_mesh returned, in its row-major layout; under torchtitan, "
                         "parallel_dims.world_mesh), or no mesh to probe the world as one dimension")
    names = list(mesh.mesh_dim_names or [f"dim{i}" for i in range(mesh.ndim)])
    if names == [WORLD_DIM]:
        return []  # the world's own mesh: every rank, one dimension, as without a mesh
    for name in names:
        if name == WORLD_DIM:
            raise ValueError(f"preflight.check: a {mesh.ndim}-D mesh with a dimension named {WORLD_DIM!r}: "
                             f"{WORLD_DIM!r} is the whole world (a 1-D mesh over every rank); pass that mesh, "
                             "or name this dimension otherwise (e.g. dp)")
        if not name.isidentifier():
            raise ValueError(f"preflight.check: mesh dimension name {name!r} cannot be used: name the mesh's "
                             "dimensions with Python identifiers (init_device_mesh(..., mesh_dim_names=(...)), "
                             f"e.g. {', '.join(KNOWN_NAMES[:3])})")
    return [MeshDim(name, int(size)) for name, size in zip(names, mesh.mesh.shape)]


def _backend_and_device(mesh: Any, backend_text: str) -> tuple[str, str]:
    """(probe backend, device) from the mesh's device type and the default group's backend string."""
    device = mesh.device_type if mesh is not None else ("cuda" if "nccl" in str(backend_text) else "cpu")
    if device == "cuda" and "nccl" in str(backend_text):
        return "nccl", "cuda"
    if "gloo" in str(backend_text) and device in ("cpu", "cuda"):
        return "gloo", device
    raise ValueError(f"preflight.check: a {device} mesh on backend {backend_text!r} cannot be probed "
                     "(preflight probes nccl on cuda and gloo)")


def _job_groups(mesh: Any, dims: list[MeshDim], backend: str, device: str, rank: int,
                world_size: int) -> JobGroups:
    """The mesh's groups as they are (no group is made), indexed as dim_groups orders them."""
    import torch.distributed as dist

    layout: dict[str, tuple[Any, list[int], int]] = {WORLD_DIM: (dist.group.WORLD, list(range(world_size)), 0)}
    for name, groups in dim_groups(dims).items():
        group = mesh.get_group(name)
        ranks = sorted(dist.get_process_group_ranks(group))
        layout[name] = (group, ranks, groups.index(ranks))
    index = bound_device_index(mesh_groups=[group for group, _, _ in layout.values()]) if device == "cuda" else None
    return JobGroups(backend, device, layout, dist.group.WORLD, device_index=index)


def bound_device_index(mesh_groups: Sequence[Any] = ()) -> int:
    """The CUDA ordinal the job bound, read here, in the trainer's thread (the current device is per thread):
    the default group's bound device (`init_process_group(device_id=...)`, which sets no current device),
    then one the mesh's groups were bound to, then the current device where this process's CUDA is
    initialised (the trainer's set_device, or DeviceMesh's from LOCAL_RANK), then LOCAL_RANK where it
    names a visible device (DeviceMesh's own rule before CUDA is initialised), else the current device."""
    import torch
    import torch.distributed as dist

    groups = [dist.distributed_c10d._get_default_group(), *mesh_groups]
    for group in groups:
        bound = getattr(group, "bound_device_id", None)
        if bound is not None and getattr(bound, "type", "cuda") == "cuda" and bound.index is not None:
            return int(bound.index)
    if torch.cuda.is_initialized():
        return int(torch.cuda.current_device())
    local = os.environ.get("LOCAL_RANK", "")
    if local.isascii() and local.isdigit() and int(local) < torch.cuda.device_count():
        return int(local)
    return int(torch.cuda.current_device())


def _mesh_repr(dims: list[MeshDim]) -> str:
    return ",".join(f"{d.name}{d.size}" for d in dims)


def _short(ranks: list[int]) -> str:
    return str(ranks) if len(ranks) <= 8 else f"[{', '.join(map(str, ranks[:8]))}, ...] ({len(ranks)} ranks)"



def _signature() -> inspect.Signature:
    """check's signature as help() and an IDE show it: its keywords and defaults are the options table's."""
    keyword = inspect.Parameter.KEYWORD_ONLY
    return inspect.Signature([
        inspect.Parameter("mesh", inspect.Parameter.POSITIONAL_OR_KEYWORD, default=None),
        *(inspect.Parameter(option.name, keyword, default=option.default) for option in API_OPTIONS),
        inspect.Parameter("on_failure", keyword, default="raise")], return_annotation="JobReport")


check.__signature__ = _signature()  # type: ignore[attr-defined]
check.__doc__ = (check.__doc__ or "") + "\n    Keywords (the CLI's flags):\n" + "".join(
    f"    {option.name}={option.default!r}: {option.flag}\n" for option in API_OPTIONS)
