"""probes/steps.measure: one buffer set per step, checked on its first call, then warm-up, barrier, timed loop."""

from __future__ import annotations

import time
from types import SimpleNamespace
from typing import Any

import torch

from preflight.lib.mesh_shape import MeshDim
from preflight.probes import ops, steps
from preflight.probes.plan import ProbePlan


def test_the_checked_call_comes_first_and_nothing_is_made_between_warm_up_and_clock(monkeypatch) -> None:
    events: list[str] = []
    made: list[Any] = []
    real_make = ops.make_buffers

    def make_buffers(*args: Any, **kwargs: Any) -> ops.Buffers:
        made.append(real_make(*args, **kwargs))
        events.append("make")
        return made[-1]

    def launch(buffers: ops.Buffers, group: Any, ranks: list[int], me: int) -> list[None]:
        assert buffers is made[0]  # every call, checked, warm-up and timed, on the one set
        events.append("call")
        return [None]  # a completed call: wait_works skips it

    def verify(buffers: ops.Buffers, me: int, n: int) -> tuple[bool, list[int]]:
        assert buffers is made[0]
        events.append("verify")
        return True, []

    monkeypatch.setattr(ops, "make_buffers", make_buffers)
    monkeypatch.setattr(ops, "launch", launch)
    monkeypatch.setattr(ops, "verify", verify)
    monkeypatch.setattr(steps, "barrier", lambda group, deadline: events.append("barrier"))
    plan = ProbePlan([MeshDim("world", 2)], ["all_reduce"], [1024], warmup=2, iters=3, world_all_reduce=False)
    fake = SimpleNamespace(groups={"world": (None, [0, 1], 0)}, world=SimpleNamespace(rank=0), plan=plan,
                           dtype=torch.float32, device=torch.device("cpu"), cuda=None, control=None)

    record = steps.measure(fake, 1, "world", "all_reduce", 1024, time.monotonic() + 60)

    assert events == ["make", "call", "verify", "call", "call", "barrier", "call", "call", "call"]
    assert record.output_ok and len(record.times_s) == 3 and record.size_bytes == 1024

