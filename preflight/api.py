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
import itertools
import os
import warnings
from collections.abc import Sequence
from dataclasses import replace
from typing import TYPE_CHECKING, Any, Literal

from preflight.checks.probe_findings import probe_hang
from preflight.commands.cli import MAX_SECONDS, interrupts_raised, validate_selection
from preflight.lib.errors import BadInput
from preflight.lib.mesh_shape import KNOWN_NAMES, WORLD_DIM, MeshDim, dim_groups
from preflight.model import ExitCode, JobReport
from preflight.options import RunOptions
from preflight.probes.session import JobGroups
from preflight.reports.targets import ReportTargets
from preflight.runner import run_in_job
from preflight.steps.launchers import resolve_world
from preflight.steps.verdict import RunRecord, build_report

if TYPE_CHECKING:
    from torch.distributed.device_mesh import DeviceMesh

OnFailure = Literal["raise", "warn", "return"]
Path = str | os.PathLike[str]
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


def check(mesh: DeviceMesh | None = None, *, timeout_s: float = 60.0, check_timeout_s: float = 10.0,
          probe_timeout_s: float = 30.0, only: Sequence[str] = (), skip: Sequence[str] = (),
          silence: Sequence[str] = (), strict: bool = False, sizes: str = "", ops: str = "", expect: str = "",
          json: Path | None = None, html: Path | None = None, junit: Path | None = None, text: Path | None = None,
          exclude_file: Path | None = None, quiet: bool = False, out_dir: Path | None = None,
          history: str | None = None, metrics: Path | None = None, on_failure: OnFailure = "raise") -> JobReport:
    """Run preflight's steps on this job's own process groups; call it on every rank. Returns the JobReport.

    mesh: the job's DeviceMesh over the whole world (init_device_mesh's row-major layout), or
    None for the world as one dimension. The keywords are the CLI's flags (`--timeout`,
    `--check-timeout`, `--probe-timeout`, `--only`, `--skip`, `--silence`, `--strict`, `--sizes`,
    `--ops`, `--expect`, `--json`/`--html`/`--junit`/`--text`/`--exclude-file` written by rank 0,
    `--quiet`, `--out-dir`, `--history` (None: $PREFLIGHT_HISTORY), `--metrics`). on_failure:
    "raise" PreflightFailed on every rank, "warn" a PreflightWarning and return, "return" the
    report silently (its exit_code says).
    A call that is wrong on its face (no process group, a mesh of another world, a keyword of
    the wrong type or value) raises RuntimeError, TypeError or ValueError on that rank before
    any rank waits for another.
    """
    import torch.distributed as dist

    if not (dist.is_available() and dist.is_initialized()):
        raise RuntimeError("preflight.check: torch.distributed has no default process group; "
                           "call init_process_group (or init_device_mesh) first")
    _typed(timeout_s=timeout_s, check_timeout_s=check_timeout_s, probe_timeout_s=probe_timeout_s)
    _typed_names(only=only, skip=skip, silence=silence)
    _typed_flags(strict=strict, quiet=quiet)
    history = os.environ.get("PREFLIGHT_HISTORY", "") if history is None else history
    _typed_text(sizes=sizes, ops=ops, expect=expect, history=history)
    _typed_paths(json=json, html=html, junit=junit, text=text, exclude_file=exclude_file, out_dir=out_dir,
                 metrics=metrics)
    if on_failure not in ON_FAILURE:
        raise ValueError(f"preflight.check: on_failure={on_failure!r}: one of {', '.join(ON_FAILURE)}")
    world_size, rank = dist.get_world_size(), dist.get_rank()
    dims = _mesh_dims(mesh, world_size)
    backend, device = _backend_and_device(mesh, dist.get_backend())
    try:
        options = RunOptions.parse(
            mesh="", sizes=sizes, ops=ops, expect=expect, timeout_s=timeout_s, check_timeout_s=check_timeout_s,
            probe_timeout_s=probe_timeout_s, only=list(only), skip=list(skip), silence=list(silence),
            strict=strict, out_dir=_path(out_dir),
            reports=ReportTargets(json=_path(json), html=_path(html), junit=_path(junit), text=_path(text),
                                  exclude=_path(exclude_file), quiet=quiet),
            backend=backend, history=history, metrics=_path(metrics),
            command_line=f"preflight.check({_mesh_repr(dims)})")
        options = replace(options, mesh=dims, world_size=world_size)
        validate_selection(options)
        world = resolve_world(os.environ)
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
        with interrupts_raised():
            code, record = run_in_job(options, world, dist.distributed_c10d._get_default_store(), groups)
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
    """The mesh's dimensions, outermost first; [] without a mesh. ValueError for a mesh preflight cannot use."""
    from torch.distributed.device_mesh import DeviceMesh

    if mesh is None:
        return []
    if not isinstance(mesh, DeviceMesh):
        raise TypeError(f"preflight.check: mesh must be a torch DeviceMesh or None, not {type(mesh).__name__}")
    ranks = mesh.mesh.flatten().tolist()
    if ranks != list(range(world_size)):
        raise ValueError(f"preflight.check: the mesh holds ranks {_short(ranks)}, the default process group "
                         f"0..{world_size - 1}: pass the job's whole mesh (not a slice), in init_device_mesh's layout")
    names = list(mesh.mesh_dim_names or [f"dim{i}" for i in range(mesh.ndim)])
    bad = [n for n in names if n == WORLD_DIM or not n.isidentifier()]
    if bad:
        raise ValueError(f"preflight.check: mesh dimension name {bad[0]!r} cannot be used "
                         f"(a Python identifier other than {WORLD_DIM!r}, e.g. {', '.join(KNOWN_NAMES[:3])})")
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
    return JobGroups(backend, device, layout, dist.group.WORLD)


def _mesh_repr(dims: list[MeshDim]) -> str:
    return ",".join(f"{d.name}{d.size}" for d in dims)


def _short(ranks: list[int]) -> str:
    return str(ranks) if len(ranks) <= 8 else f"[{', '.join(map(str, ranks[:8]))}, ...] ({len(ranks)} ranks)"


def _typed(**seconds: Any) -> None:
    for name, value in seconds.items():
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise TypeError(f"preflight.check: {name} must be a number of seconds, not {type(value).__name__}")
        if not 0 < value <= MAX_SECONDS:
            raise ValueError(f"preflight.check: {name}={value!r}: must be above 0 and at most {MAX_SECONDS:g}")


def _typed_names(**lists: Any) -> None:
    for name, value in lists.items():
        if isinstance(value, str) or not isinstance(value, Sequence) or not all(isinstance(v, str) for v in value):
            raise TypeError(f"preflight.check: {name} must be a list of strings, not {type(value).__name__}")


def _typed_flags(**flags: Any) -> None:
    for name, value in flags.items():
        if not isinstance(value, bool):
            raise TypeError(f"preflight.check: {name} must be True or False, not {type(value).__name__}")


def _typed_text(**texts: Any) -> None:
    for name, value in texts.items():
        if not isinstance(value, str):
            raise TypeError(f"preflight.check: {name} must be a string as on the command line (e.g. "
                            f"sizes=\"1M,64M\"), not {type(value).__name__}")


def _path(value: Path | None) -> str | None:
    return None if value is None else os.fspath(value)


def _typed_paths(**paths: Any) -> None:
    for name, value in paths.items():
        if value is not None and not isinstance(value, (str, os.PathLike)):
            raise TypeError(f"preflight.check: {name} must be a path or None, not {type(value).__name__}")
