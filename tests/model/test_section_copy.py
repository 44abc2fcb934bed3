"""clone: a rank's copy of a shared section is msgspec.structs.replace's result, and the shared one is untouched."""

from __future__ import annotations

import msgspec
import pytest

from preflight.model.rank_facts import SystemLimits, World
from preflight.model.section_copy import clone


class _Frozen(msgspec.Struct, frozen=True):
    name: str
    count: int = 0


class _Plain(msgspec.Struct):
    name: str
    count: int = 0


def test_a_worlds_copy_has_its_own_fields_and_every_shared_one() -> None:
    shared = World("slurm", rank=0, world_size=16, host="node01", master_addr="node01", job_id="42",
                   expected_hosts={0: "node01"}, raw={"SLURM_JOB_ID": "42"})
    own = clone(shared, rank=9, host="node02", local_rank=1)
    assert own == msgspec.structs.replace(shared, rank=9, host="node02", local_rank=1)
    assert (shared.rank, shared.host, shared.local_rank) == (0, "node01", 0)
    assert own.raw is shared.raw  # shared, not copied: rank 0 holds one per host or job


@pytest.mark.parametrize("section", [_Frozen("a", 1), _Plain("a", 1), SystemLimits(cpu_count=8, pid=1)])
def test_frozen_and_plain_sections_copy_alike(section: object) -> None:
    field = "count" if hasattr(section, "count") else "pid"
    own = clone(section, **{field: 7})
    assert own == msgspec.structs.replace(section, **{field: 7}) and own is not section
    assert getattr(section, field) != 7
