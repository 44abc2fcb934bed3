"""What the probes will do: the options' mesh, ops, sizes and expectations, defaults filled per device."""

from __future__ import annotations

from msgspec import Struct, field

from preflight.lib.mesh_shape import WORLD_DIM, MeshDim
from preflight.options import RunOptions
from preflight.probes.levels import LEVELS, STANDARD

CONNECT = "connect"  # the pseudo-op of a step that only creates a dimension's communicators
# The default level's plan (probes/levels.py): sizes small enough for a 2-core CI box on CPU, nccl-tests-like on GPU.
DEFAULT_OPS = STANDARD.ops
DEFAULT_SIZES = STANDARD.sizes
DEFAULT_WARMUP = STANDARD.warmup
DEFAULT_ITERS = STANDARD.iters


class ProbePlan(Struct):
    """The resolved plan: mesh dimensions, ops per dimension, sizes, iterations."""

    dims: list[MeshDim]
    ops: list[str]
    sizes: list[int]
    warmup: int
    iters: int
    world_all_reduce: bool  # the default plan adds one whole-world all_reduce
    expect: dict[str, float] = field(default_factory=dict)
    # One figure per iteration instead of elapsed / iters (timing.timed_loop): the judgment
    # weighs the spread of the iterations, not only their median (probes/judge.py).
    per_iteration: bool = True

    def steps(self) -> list[tuple[str, str, int]]:
        """(dim, op, size) in the order every rank runs them; send_recv only on pp.

        First one CONNECT step per dimension that has anything to measure: it creates that
        dimension's communicators (NCCL creates them lazily, at the first op on a group and the
        first send to a peer) under its own deadline, so a rank stuck in communicator setup is
        named like a hung collective. CONNECT steps measure nothing.
        """
        measured = self.measured_steps()
        dims = list(dict.fromkeys(dim for dim, _, _ in measured))
        return [(dim, CONNECT, 0) for dim in dims] + measured

    def nothing_to_measure(self, world_size: int) -> list[str]:
        """Why the plan, or an op it was asked for, measures nothing (RUN012's reasons); [] when all measure.

        One rank still runs its steps (they verify the data path), but no collective moves data
        between ranks: its bus bandwidth is 0 by definition, so that is no measurement either.
        """
        if world_size < 2:
            return ["one rank: no collective to measure (start 2 or more: preflight launch -n N, srun, torchrun)"]
        measured = {op for _, op, _ in self.measured_steps()}
        reasons = []
        for op in self.ops:
            if op in measured:
                continue
            if op == "send_recv":
                reasons.append("send_recv needs a pipeline dimension (--mesh pp2,... names one)")
            else:
                reasons.append(f"{op}: every dimension of the mesh has one rank, so nothing to measure")
        return reasons

    def measured_steps(self) -> list[tuple[str, str, int]]:
        """The measured (dim, op, size) steps, without the CONNECT steps."""
        out = []
        for dim in self.dims:
            for op in self.ops:
                if op == "send_recv" and dim.name != "pp" and len(self.dims) > 1:
                    continue
                if dim.size < 2 and len(self.dims) > 1:
                    continue  # a size-1 dimension has nothing to move (a lone rank still measures itself)
                out += [(dim.name, op, size) for size in self.sizes]
        if self.world_all_reduce and not any(d.name == WORLD_DIM for d in self.dims):
            out += [(WORLD_DIM, "all_reduce", size) for size in self.sizes]
        return out


def build_plan(options: RunOptions, device: str) -> ProbePlan:
    """The plan for the options' world (see RunOptions.for_world), what they leave open filled by their
    --level (probes/levels.py) per device (cpu / cuda)."""
    probes = options.probes
    if probes.world_size is None:
        raise ValueError("build_plan needs the options resolved for a world: options.for_world(world_size)")
    dims = list(probes.mesh) or [MeshDim(WORLD_DIM, probes.world_size)]
    level = LEVELS[probes.level]  # what the options leave open, the level fills
    return ProbePlan(
        dims=dims,
        ops=probes.ops or list(level.ops),
        sizes=probes.sizes or list(level.sizes[device]),
        warmup=level.warmup[device] if probes.warmup is None else probes.warmup,
        iters=max(1, level.iters[device] if probes.iters is None else probes.iters),
        world_all_reduce=not probes.ops and len(dims) > 1,
        expect=dict(probes.expect),
    )
