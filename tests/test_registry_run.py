"""Checks run under a deadline: one that raises or overruns is could-not-run, never a pass."""

from __future__ import annotations

import time

from preflight.model import RankFacts, Severity, World
from preflight.registry import (
    LOCAL,
    CheckContext,
    CheckSpec,
    NotApplicable,
    Problem,
    run_checks,
)


def spec(check_id: str, func) -> CheckSpec:
    func.__doc__ = "A test check."
    return CheckSpec(check_id, "test", LOCAL, Severity.WARN, "do x", func)


FACTS = RankFacts(rank=2, host="h2", world=World(launcher="env", rank=2, world_size=4))


def test_raising_and_overrunning_checks_become_could_not_run() -> None:
    def raises(facts, ctx):
        raise KeyError("network")

    def sleeps(facts, ctx):
        time.sleep(5)
        return []

    def finds(facts, ctx):
        return [Problem("bad", ranks=[facts.rank], hosts=[facts.host])]

    findings, outcomes = run_checks(
        [spec("TST001", raises), spec("TST002", sleeps), spec("TST003", finds), spec("TST004", lambda f, c: [])],
        FACTS, CheckContext(), 0.3, rank=2, host="h2",
    )
    by_id = {f.check_id: f for f in findings}
    assert by_id["TST001"].severity == Severity.COULD_NOT_RUN and "KeyError" in by_id["TST001"].message
    assert by_id["TST002"].severity == Severity.COULD_NOT_RUN and "within 0.3s" in by_id["TST002"].message
    assert by_id["TST001"].ranks == [2] and by_id["TST001"].hosts == ["h2"]
    assert by_id["TST003"].severity == Severity.WARN and by_id["TST003"].hint == "do x"
    assert "TST004" not in by_id
    assert [o.status for o in outcomes] == [Severity.COULD_NOT_RUN, Severity.COULD_NOT_RUN, Severity.WARN,
                                            Severity.OK]


def test_a_check_that_does_not_apply_is_skipped_with_its_reason_never_passed() -> None:
    def gpu_only(facts, ctx):
        return [Problem("found on a GPU")]

    def finds_out_late(facts, ctx):
        raise NotApplicable("no RDMA NIC")

    no_gpu = CheckSpec("TST010", "test", LOCAL, Severity.ERROR, "x", gpu_only,
                       applies=lambda facts, ctx: "no NVIDIA driver")
    applies = CheckSpec("TST011", "test", LOCAL, Severity.ERROR, "x", gpu_only, applies=lambda facts, ctx: None)
    late = CheckSpec("TST012", "test", LOCAL, Severity.ERROR, "x", finds_out_late)
    findings, outcomes = run_checks([no_gpu, applies, late], FACTS, CheckContext(), 5, rank=2, host="h2")
    assert [f.check_id for f in findings] == ["TST011"]  # a skipped check produces no finding
    assert [(o.check_id, o.status, o.reason) for o in outcomes] == [
        ("TST010", Severity.SKIPPED, "no NVIDIA driver"), ("TST011", Severity.ERROR, ""),
        ("TST012", Severity.SKIPPED, "no RDMA NIC")]
