"""Equal strings of decoded own parts made one object (model/string_sharing.py)."""

from __future__ import annotations

import types
import typing
from typing import Any

import msgspec
import pytest

from preflight.channel.sections import SharedSections
from preflight.model import GpuFabric, GpuHealth, HealthFacts
from preflight.model.agreement import RankStamp
from preflight.model.codec import decode, encode
from preflight.model.placement_facts import AffinityFacts, NicPlacement, PlacementFacts
from preflight.model.string_sharing import share_strings


def _strings(value: Any, path: str = "") -> list[tuple[str, str]]:
    """(where, string) of every string in a decoded value, keys included, at any depth: a plain walk."""
    if isinstance(value, str):
        return [(path, value)]
    if isinstance(value, (list, tuple)):
        return [found for i, item in enumerate(value) for found in _strings(item, f"{path}[{i}]")]
    if isinstance(value, dict):
        return [found for key, item in value.items()
                for found in (*_strings(key, f"{path}.key"), *_strings(item, f"{path}[{key!r}]"))]
    if isinstance(value, msgspec.Struct):
        return [found for item in msgspec.structs.fields(value)
                for found in _strings(getattr(value, item.name), f"{path}.{item.name}")]
    return []


def _gpu_rank(local: int, host: int) -> tuple[HealthFacts, PlacementFacts]:
    """A GPU rank's own parts as a rank sends them: its bound GPU, its CPUs and NIC."""
    bus = f"00000000:{0x18 + local * 0x10:02X}:00.0"
    health = HealthFacts(nvml="ok", bound_index=local, bound_reason="LOCAL_RANK", visible_gpus=8,
                         gpus=[GpuHealth(index=local, pci_bus_id=bus, unavailable=["pcie_gen"], vbios="96.00.89.00.01",
                                         fabric=GpuFabric(state=3, cluster_uuid=f"{0:08x}-0000-4000-8000-{0:012x}"))],
                         xid_watch="watching", nccl_ports=[f"mlx5_{i}/1" for i in range(8)],
                         nccl_ports_source="every active port", imex_channels=["channel0"])
    placement = PlacementFacts(affinity=AffinityFacts(
        cpus=[local], gpu_bus_id=bus, gpu_pci_path=["0000:30:00.0", bus],
        nics=[NicPlacement(name=f"mlx5_{local}", pci_path=["0000:30:00.0"], chosen_by="every RDMA port")],
        local_nics=[f"mlx5_{local}"]))
    placement.build.container = f"podman:image=host-{host}"
    return health, placement


def test_two_hosts_same_local_rank_share_every_equal_string_and_keep_their_values() -> None:
    seen: dict[str, str] = {}
    decoded = [decode(encode(part), type(part)) for host in (1, 2) for part in _gpu_rank(3, host)]
    before = [msgspec.structs.replace(value) for value in decoded]
    shared = [share_strings(value, seen) for value in decoded]
    assert shared == before and all(a is b for a, b in zip(shared, decoded))
    first, second = _strings(shared[0]) + _strings(shared[1]), _strings(shared[2]) + _strings(shared[3])
    assert [where for where, _ in first] == [where for where, _ in second]
    pairs = [(where, a, b) for (where, a), (_, b) in zip(first, second) if a == b and a]
    assert {where for where, _, _ in pairs} >= {".gpus[0].pci_bus_id", ".gpus[0].fabric.cluster_uuid", ".nccl_ports[7]",
                                               ".affinity.nics[0].chosen_by", ".affinity.gpu_pci_path[1]"}
    assert [where for where, a, b in pairs if a is not b] == []
    assert shared[1].build.container != shared[3].build.container  # what differs stays its own


def _filled(hint: Any, name: str) -> Any:
    """A value of a declared type with every field, list and map filled: a string wherever one may be."""
    origin, args = typing.get_origin(hint), [a for a in typing.get_args(hint) if a is not type(None)]
    if origin in (typing.Union, types.UnionType):
        return _filled(str if str in args else args[0], name)
    if origin is list:
        return [_filled(args[0], f"{name}{i}") for i in range(2)]
    if origin is dict:
        return {_filled(args[0], f"{name}-key"): _filled(args[1], name)}
    if isinstance(hint, type) and issubclass(hint, msgspec.Struct):
        hints = typing.get_type_hints(hint)
        return hint(**{f.name: _filled(hints[f.name], f.name) for f in msgspec.structs.fields(hint)})
    return {str: f"text of {name}", int: 7, float: 0.5, bool: True}.get(hint, f"any {name}")


@pytest.mark.parametrize("model", [HealthFacts, PlacementFacts])
def test_no_string_of_an_own_part_is_left_unshared_whatever_field_holds_it(model: type) -> None:
    """Every field, list and map of the own parts' model holding a string (a filled value): decoded twice
    and shared, the second copy's strings are the first copy's objects (a field the sharer missed fails)."""
    data = encode(_filled(model, "part"))
    seen: dict[str, str] = {}
    one, two = (share_strings(decode(data, model), seen) for _ in range(2))
    pairs = list(zip(_strings(one), _strings(two), strict=True))
    assert len(pairs) > 20
    assert [where for (where, a), (_, b) in pairs if a is not b] == []


def test_a_frozen_model_is_left_as_it_is() -> None:
    stamp = RankStamp(preflight="0.1.0", wire=3)
    assert share_strings(stamp, {}) is stamp


def test_rank_0_holds_one_object_per_string_of_its_ranks_own_parts() -> None:
    shared = SharedSections()
    health = [shared.own_part("health", encode(_gpu_rank(local, 1)[0]), HealthFacts) for local in range(8)]
    assert len({id(h.nccl_ports[0]) for h in health}) == 1 and len({id(h.gpus[0].vbios) for h in health}) == 1
    assert [h.bound_index for h in health] == list(range(8))
