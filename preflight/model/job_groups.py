"""The process groups a running job already made, as `preflight.check` hands them to the probes."""

from __future__ import annotations

from typing import Any

from msgspec import Struct


class JobGroups(Struct):
    """Process groups the job already made (preflight.check): the probes use these, never new ones.

    dims maps each dimension (the mesh's names, and WORLD_DIM for the default group) to
    (process group, its global ranks, the group's index in dim_groups' row-major order).
    The groups are torch objects (Any here: the model imports no torch).
    """

    backend: str  # "gloo" or "nccl": what the job's groups run on for `device`
    device: str  # "cpu" or "cuda"
    dims: dict[str, tuple[Any, list[int], int]]
    world_group: Any  # the job's default process group
    # The job's CUDA device, read in the caller's (the trainer's) thread: CUDA's current device is
    # per thread, and a helper thread would read 0 whatever the job bound.
    device_index: int | None = None
