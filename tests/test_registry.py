"""The check registry: ids, tags, docstrings, selection by tag, engine checks called by reference."""

from __future__ import annotations

import pytest

from preflight.checks.probe_findings import probe_hang
from preflight.checks.rank_roster import missing_ranks
from preflight.checks.run_findings import probes_not_started
from preflight.model import Finding, Severity
from preflight.model.codec import decode, encode, from_builtins
from preflight.model.probe_faults import Hang
from preflight.registry import (
    CROSS,
    ENGINE,
    LOCAL,
    EngineCheck,
    JobView,
    Problem,
    Tags,
    all_checks,
    check,
    engine_check,
    get_check,
    select_checks,
)


def test_every_check_has_an_explanation_and_a_hint() -> None:
    specs = all_checks()
    assert len(specs) >= 5
    for spec in specs:
        assert spec.explanation and spec.title and spec.hint, spec.id


def test_bad_ids_and_missing_docstrings_are_refused() -> None:
    with pytest.raises(ValueError, match="must look like"):
        check("bad", tag=Tags.ENV, scope=LOCAL, severity=Severity.WARN, hint="h")
    with pytest.raises(ValueError, match="docstring"):
        check("TST999", tag=Tags.ENV, scope=LOCAL, severity=Severity.WARN, hint="h")(lambda facts, ctx: [])


def test_tags_are_the_declared_constants_each_in_use() -> None:
    with pytest.raises(ValueError, match="unknown tag 'envv'"):
        check("TST998", tag="envv", scope=LOCAL, severity=Severity.WARN, hint="h")
    with pytest.raises(ValueError, match="unknown tag"):
        engine_check("TST997", tag="t", severity=Severity.WARN, hint="h")
    assert {spec.tag for spec in all_checks()} == set(Tags.all())  # no undeclared tag, no tag without a check


def test_select_by_scope_and_tags() -> None:
    local = select_checks(LOCAL)
    assert local and all(s.scope == LOCAL for s in local)
    assert all(s.tag == "world" for s in select_checks(CROSS, only_tags=["world"]))
    assert not any(s.tag == "world" for s in select_checks(CROSS, skip_tags=["world"]))


def test_engine_findings_carry_the_checks_id_severity_and_hint() -> None:
    [finding] = probes_not_started.report(reason="2 rank(s) did not report")
    spec = next(s for s in all_checks() if s.id == "RUN003")
    assert spec.scope == ENGINE
    assert (finding.check_id, finding.severity, finding.hint) == ("RUN003", spec.severity, spec.hint)
    assert "2 rank(s) did not report" in finding.message


def test_problem_hint_overrides_only_when_given() -> None:
    spec = next(s for s in all_checks() if s.id == "NCCL001")
    assert spec.finding(Problem("m")).hint == spec.hint
    assert spec.finding(Problem("m", hint="other")).hint == "other"


def test_engine_checks_are_called_by_reference_with_their_typed_signature() -> None:
    assert isinstance(probes_not_started, EngineCheck) and probes_not_started.id == "RUN003"
    assert probes_not_started.spec is get_check("RUN003")
    with pytest.raises(TypeError):
        probes_not_started.report(why="renamed")  # type: ignore[call-arg]
    with pytest.raises(ValueError, match="scope"):
        check("TST996", tag=Tags.RUN, scope=ENGINE, severity=Severity.WARN, hint="h")


def test_engine_checks_refuse_untyped_or_free_keyword_signatures() -> None:
    def free(**details):
        """A check that takes anything."""
        return []

    def untyped(reason):
        """A check whose argument has no type."""
        return []

    with pytest.raises(ValueError, match=r"\*details"):
        engine_check("TST995", tag=Tags.RUN, severity=Severity.WARN, hint="h")(free)
    with pytest.raises(ValueError, match="annotation"):
        engine_check("TST994", tag=Tags.RUN, severity=Severity.WARN, hint="h")(untyped)


def test_a_hang_is_reported_from_the_probes_own_hang_object() -> None:
    hang = Hang(step=3, dim="tp", op="all_reduce", size_bytes=1 << 20, group_index=1, ranks=[2, 3], waiting=[2],
                culprits={3: "never reached the step"}, phase="op", elapsed_s=5.25)
    [finding] = probe_hang.report(hang, hosts={2: "n1", 3: "n2"}, timeout_s=5.0, reported_after_s=6.0)
    assert finding.check_id == probe_hang.id == "BW002"
    assert (finding.ranks, finding.hosts, finding.blames_host) == ([3], ["n2"], True)
    assert "all_reduce on tp group 1 at 1 MiB did not finish within 5s" in finding.message
    assert finding.data["detected_after_s"] == 5.25 and finding.data["waiting"] == [2]


def test_who_is_blamed_is_declared_by_the_check_and_survives_json() -> None:
    blaming = {spec.id for spec in all_checks() if spec.blames_host}
    gpu_faults = {"GPU003", "GPU004", "GPU007", "GPU008", "GPU009", "GPU011", "GPU014", "GPU016", "GPU018", "GPU031",
                  "GPU040"}  # checks/gpu_health.py, gpu_agreement.py: a faulty GPU is the host's fault
    device_faults = {"DEV001", "DEV002"}  # checks/device_probe.py: a GPU that computes wrong numbers
    # checks/storage.py: a host without the shared checkpoint path, corrupting it, or below --expect on it
    storage_faults = {"STO001", "STO006", "STO008"}
    # checks/fabric.py, nic_fabric.py: a host whose fabric is degraded, misregistered, without IMEX or a RoCE v2 GID
    fabric_faults = {"GPU022", "GPU034", "GPU035", "NIC005"}
    assert blaming == {"BW001", "BW002", "BW005", "BW012", "NET008", "RANK001", "NIC001", "RUN008"} | gpu_faults \
        | device_faults | storage_faults | fabric_faults
    spec = get_check("RANK001")
    assert spec is not None
    [finding] = [spec.finding(problem) for problem in missing_ranks(JobView(world_size=1))]
    assert finding.blames_host and "host_fault" not in finding.data
    assert decode(encode(finding), Finding) == finding
    assert not from_builtins({"check_id": "X001", "severity": "error", "message": "m"}, Finding).blames_host
