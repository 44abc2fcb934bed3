"""`--mesh pp2,tp4`: the DeviceMesh shape, outermost dimension first, as init_device_mesh takes it.

The remainder of WORLD_SIZE becomes `dp`, placed right after `pp` (outermost when there is
no pp): the order torchtitan and KempnerForge use (pp, dp..., ep, tp). `dp*` (or `dp-1`)
places the remainder explicitly. Any identifier names a dimension; pp, dp, dp_replicate,
dp_shard, cp, ep and tp are the usual ones. A bad mesh is BadInput with the arithmetic.
Input is bounded before it is read: at most MAX_MESH_CHARS characters, names of ASCII letters,
digits and `_`, sizes of ASCII digits, and a product of at most MAX_MESH_PRODUCT ranks.
"""

from __future__ import annotations

import math
import re

from msgspec import Struct

from preflight.lib.errors import BadInput
from preflight.lib.numbers import MAX_DIGITS, shown

WILDCARD = -1
KNOWN_NAMES = ("pp", "dp", "dp_replicate", "dp_shard", "cp", "ep", "tp")
WORLD_DIM = "world"  # the one dimension probed when no --mesh is given

MAX_MESH_CHARS = 1024
MAX_MESH_PRODUCT = 1_000_000  # ranks; a mesh larger than this is a typo, not a job
_ENTRY = re.compile(rf"([A-Za-z_][A-Za-z0-9_]{{0,63}}?)([0-9]{{1,{MAX_DIGITS}}}|\*|-1)", re.ASCII)


class MeshDim(Struct, frozen=True):
    """One mesh dimension: its name and size (WILDCARD before the world size is known)."""

    name: str
    size: int


def parse_mesh_syntax(text: str) -> list[MeshDim]:
    """Parse `pp2,dp*,tp4` without a world size: names, sizes, duplicates, wildcards."""
    text = text.strip()
    if not text:
        return []
    if len(text) > MAX_MESH_CHARS:
        raise BadInput(f"--mesh {shown(text)}: longer than {MAX_MESH_CHARS} characters")
    dims: list[MeshDim] = []
    for raw in text.split(","):
        entry = raw.strip()
        match = _ENTRY.fullmatch(entry)
        if not match:
            raise BadInput(f"--mesh {shown(text)}: {shown(entry)} is not NAME<size> (e.g. tp4), NAME* or NAME-1")
        name, size_text = match.groups()
        if size_text in ("*", "-1"):
            size = WILDCARD
        else:
            size = int(size_text)
            if size == 0:
                raise BadInput(f"--mesh {text!r}: dimension {name} has size 0")
        if any(d.name == name for d in dims):
            raise BadInput(f"--mesh {text!r}: dimension {name} appears twice")
        dims.append(MeshDim(name, size))
    wildcards = [d.name for d in dims if d.size == WILDCARD]
    if len(wildcards) > 1:
        raise BadInput(f"--mesh {text!r}: two wildcard dimensions ({', '.join(wildcards)}); at most one may be * or -1")
    product = math.prod(d.size for d in dims if d.size != WILDCARD)
    if product > MAX_MESH_PRODUCT:
        raise BadInput(f"--mesh {shown(text)}: {product} ranks is more than the maximum {MAX_MESH_PRODUCT}")
    if wildcards and any(d.name == WORLD_DIM for d in dims):
        raise BadInput(f"--mesh {text!r}: {WORLD_DIM!r} is reserved for the whole-world probe")
    return dims


def resolve_mesh(text: str, world_size: int) -> list[MeshDim]:
    """`resolve_dims` of `parse_mesh_syntax(text)`: the full mesh for this world size."""
    return resolve_dims(parse_mesh_syntax(text), world_size)


def resolve_dims(dims: list[MeshDim], world_size: int) -> list[MeshDim]:
    """The full mesh for this world size, outermost first; [] when no --mesh was given.

    The remainder becomes the wildcard dimension, or `dp` right after `pp` (outermost when
    there is no pp) when no wildcard was written and the product falls short. A resolved
    mesh resolves to itself.
    """
    if not dims:
        return []
    text = mesh_text(dims)
    fixed = [d for d in dims if d.size != WILDCARD]
    product = math.prod(d.size for d in fixed)
    spelled = "x".join(f"{d.name}{d.size}" for d in fixed) or "1"
    if world_size % product:
        raise BadInput(f"--mesh {text!r}: product {spelled} = {product} does not divide WORLD_SIZE {world_size}")
    remainder = world_size // product
    if any(d.size == WILDCARD for d in dims):
        return [MeshDim(d.name, remainder) if d.size == WILDCARD else d for d in dims]
    if remainder == 1:
        return list(dims)
    if any(d.name == "dp" for d in dims):
        raise BadInput(f"--mesh {text!r}: product {spelled} = {product} leaves {remainder} of WORLD_SIZE "
                       f"{world_size} unassigned, and dp is already given (write dp* to size it)")
    at = next((i + 1 for i, d in enumerate(dims) if d.name == "pp"), 0)
    return [*dims[:at], MeshDim("dp", remainder), *dims[at:]]


def mesh_text(dims: list[MeshDim]) -> str:
    """`pp2,dp2,tp4`, the mesh as the user would write it (a wildcard as `dp*`)."""
    return ",".join(f"{d.name}{'*' if d.size == WILDCARD else d.size}" for d in dims)


def dim_groups(dims: list[MeshDim]) -> dict[str, list[list[int]]]:
    """Every group of every dimension, as global ranks, in init_device_mesh's row-major layout.

    A group of dimension k holds the ranks whose coordinates agree on every other dimension;
    group indices follow the other coordinates in row-major order (what mesh[name] gives).
    """
    sizes = [d.size for d in dims]
    total = math.prod(sizes)
    strides = [math.prod(sizes[i + 1:]) for i in range(len(sizes))]
    out: dict[str, list[list[int]]] = {}
    for k, dim in enumerate(dims):
        groups: dict[tuple[int, ...], list[int]] = {}
        for rank in range(total):
            coord = tuple((rank // strides[i]) % sizes[i] for i in range(len(sizes)) if i != k)
            groups.setdefault(coord, []).append(rank)
        out[dim.name] = [groups[c] for c in sorted(groups)]
    return out
