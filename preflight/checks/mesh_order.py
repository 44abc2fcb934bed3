"""The mesh order against the fabric: each DeviceMesh dimension's groups inside one NVLink domain.

`--mesh pp2,tp4` lays ranks out as init_device_mesh does, row-major, outermost first: the last
dimension's groups are consecutive ranks, the first's are ranks a whole stride apart. Whether a
group stays on NVLink depends on that order and on where the launcher put the ranks: a tp group
across two hosts (or two NVLink domains) runs over the network. Where a group's ranks share an
NVLink domain (the same fabric cluster UUID and clique, checks/fabric.py) it stays on NVLink even
across hosts (a GB200 NVL72 rack); elsewhere the host is the domain.

Every order of the mesh's dimensions is scored by the dimensions it leaves spanning domains, the
most bandwidth-hungry first (tp, cp, ep, dp_shard, dp, pp), each by how many domains its groups
reach; the best order (the nearest to the given one among equals) is named in the finding when it
beats the given one. Whether a dimension's groups span depends only on its size and its stride
(the product of the sizes after it), so each (size, stride) is judged once, by comparing slices of
the ranks' domain list (C-speed, O(world) each).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from itertools import permutations

from preflight.checks.fabric import nvlink_domain
from preflight.lib.hostlist import rank_ranges
from preflight.model import Finding, Severity
from preflight.registry import CROSS, JobView, Problem, Tags, check

# How much a dimension's collectives need NVLink: the higher, the more it must stay inside a domain.
NEED = {"tp": 6, "cp": 5, "ep": 4, "dp_shard": 3, "dp": 2, "dp_replicate": 2, "pp": 1}
OTHER_NEED = 3
MAX_DIMS = 7  # 5040 orders; a mesh of more dimensions is judged as given


def first_spanning_group(domains: Sequence[str], size: int, stride: int) -> list[int] | None:
    """The ranks of the first group of a (size, stride) dimension whose domains differ; None if none does."""
    block = size * stride
    for start in range(0, len(domains), block):
        head = domains[start:start + stride]
        for k in range(1, size):
            if domains[start + k * stride:start + (k + 1) * stride] != head:
                offset = next(j for j in range(stride) if domains[start + k * stride + j] != head[j])
                return [start + offset + i * stride for i in range(size)]
    return None


class _Layouts:
    """Which dimensions an order leaves spanning domains, each (size, stride) judged once."""

    def __init__(self, domains: Sequence[str]) -> None:
        self.domains = domains
        self._spans: dict[tuple[int, int], list[int] | None] = {}

    def group(self, size: int, stride: int) -> list[int] | None:
        key = (size, stride)
        if key not in self._spans:
            self._spans[key] = first_spanning_group(self.domains, size, stride) if size > 1 else None
        return self._spans[key]

    def spanning(self, order: Sequence[tuple[str, int]]) -> dict[str, list[int]]:
        found: dict[str, list[int]] = {}
        stride = 1
        for name, size in reversed(order):
            group = self.group(size, stride)
            if group is not None:
                found[name] = group
            stride *= size
        return found


def _score(spanning: dict[str, list[int]], domains: Sequence[str]) -> list[tuple[int, int]]:
    """(need, domains its example group spans) of each spanning dimension, neediest first: less is better."""
    return sorted(((NEED.get(name, OTHER_NEED), len({domains[r] for r in group})) for name, group in spanning.items()),
                  reverse=True)


def _moves(order: Sequence[tuple[str, int]], given: Sequence[tuple[str, int]]) -> int:
    """How far an order is from the given one (pairs swapped): the nearest better order is named."""
    place = {name: i for i, (name, _) in enumerate(given)}
    positions = [place[name] for name, _ in order]
    return sum(1 for i in range(len(positions)) for j in range(i + 1, len(positions)) if positions[i] > positions[j])


def mesh_text(order: Sequence[tuple[str, int]]) -> str:
    """`pp2,tp4`: an order as --mesh takes it."""
    return ",".join(f"{name}{size}" for name, size in order)


def _applies(job: JobView) -> str | None:
    return None if len([size for _, size in job.mesh if size > 1]) >= 2 else "no --mesh of two dimensions or more"


@check("LAYOUT006", tag=Tags.LAYOUT, scope=CROSS, applies=_applies, severity=Severity.WARN,
       hint="Reorder --mesh (and the trainer's init_device_mesh) as the finding says: the dimension that moves "
       "most data (tp, then cp, ep, dp_shard) innermost, inside one host or NVLink domain; or have the launcher "
       "place consecutive ranks on one host (srun --distribution=block).")
def mesh_order_spans_domains(job: JobView) -> Iterable[Problem]:
    """A DeviceMesh dimension's groups span NVLink domains (or hosts) where another mesh order keeps them inside one.

    A tp group split across hosts runs its all-reduces over the network at a tenth of NVLink's
    bandwidth; the mission's `--mesh pp2,tp4` written as `tp4,pp2`, or ranks placed cyclically,
    does exactly that. The finding names the order (outermost first) that keeps the dimension
    inside one domain; dimensions that must span domains anyway (tp8 on 4-GPU hosts) are left to
    the probes (BW008).
    """
    mesh = [(name, size) for name, size in job.mesh]
    world = 1
    for _, size in mesh:
        world *= size
    by_rank = {f.rank: f for f in job.ranks}
    if world != len(by_rank) or set(by_rank) != set(range(world)) or len(mesh) > MAX_DIMS:
        return  # ranks missing (RANK001 says so) or a mesh this check does not reorder
    nvlink = [nvlink_domain(by_rank[r]) for r in range(world)]
    domains = [domain or f"host {by_rank[r].host}" for r, domain in enumerate(nvlink)]
    if len(set(domains)) < 2:
        return
    layouts = _Layouts(domains)
    given = layouts.spanning(mesh)
    if not given:
        return
    best = min(permutations(mesh), key=lambda order: (_score(layouts.spanning(order), domains), _moves(order, mesh)))
    left = layouts.spanning(best)
    if _score(left, domains) >= _score(given, domains):
        return
    kind = "NVLink domains" if any(nvlink) else "hosts"
    moved = [name for name, _ in best if name in left and name not in given]
    for name, group in given.items():
        if name in left:
            continue
        where = sorted({by_rank[r].host if kind == "hosts" else domains[r] for r in group})
        also = f" ({', '.join(moved)} then span{'s' if len(moved) == 1 else ''} {kind} instead)" if moved else ""
        yield Problem(f"{name} groups span {kind} with --mesh {mesh_text(mesh)}: e.g. ranks "
                      f"{rank_ranges(group)} on {', '.join(where[:4])}; --mesh {mesh_text(best)} keeps every "
                      f"{name} group inside one {kind[:-1]}{also}",
                      ranks=group, hosts=sorted({by_rank[r].host for r in group}),
                      data={"dim": name, "mesh": mesh_text(mesh), "better_mesh": mesh_text(best), "span": kind,
                            "example_ranks": group})


def leave_to_layout(before: Sequence[Finding], probes: Sequence[Finding], silenced: Iterable[str] = ()
                    ) -> list[Finding]:
    """The probes' findings less BW008 ("a tp group spans hosts") for each dimension LAYOUT006 already named
    before the probes, with the mesh order that keeps it inside one host or NVLink domain: one cause, one
    finding, the one that says the fix. BW008 stays where no order helps (tp8 on 4-GPU hosts), where
    LAYOUT006 did not run, and where it was --silence'd (its finding would not be seen)."""
    if "LAYOUT006" in {s.upper() for s in silenced}:
        return list(probes)
    named = {f.data.get("dim") for f in before if f.check_id == "LAYOUT006"}
    return [f for f in probes if not (f.check_id == "BW008" and f.data.get("dim") in named)]
