"""The check registry: ids, docstrings, selection by tag, explain text for every check."""

from __future__ import annotations

import pytest

from preflight.model import Severity
from preflight.registry import CROSS, ENGINE, LOCAL, Problem, all_checks, check, engine_findings, select_checks


def test_every_check_has_an_explanation_and_a_hint() -> None:
    specs = all_checks()
    assert len(specs) >= 5
    for spec in specs:
        assert spec.explanation and spec.title and spec.hint, spec.id


def test_bad_ids_and_missing_docstrings_are_refused() -> None:
    with pytest.raises(ValueError, match="must look like"):
        check("bad", tag="t", scope=LOCAL, severity=Severity.WARN, hint="h")
    with pytest.raises(ValueError, match="docstring"):
        check("TST999", tag="t", scope=LOCAL, severity=Severity.WARN, hint="h")(lambda facts, ctx: [])


def test_select_by_scope_and_tags() -> None:
    local = select_checks(LOCAL)
    assert local and all(s.scope == LOCAL for s in local)
    assert all(s.tag == "world" for s in select_checks(CROSS, only_tags=["world"]))
    assert not any(s.tag == "world" for s in select_checks(CROSS, skip_tags=["world"]))


def test_engine_findings_carry_the_checks_id_severity_and_hint() -> None:
    [finding] = engine_findings("RUN003", reason="2 rank(s) did not report")
    spec = next(s for s in all_checks() if s.id == "RUN003")
    assert spec.scope == ENGINE
    assert (finding.check_id, finding.severity, finding.hint) == ("RUN003", spec.severity, spec.hint)
    assert "2 rank(s) did not report" in finding.message


def test_problem_hint_overrides_only_when_given() -> None:
    spec = next(s for s in all_checks() if s.id == "NCCL001")
    assert spec.finding(Problem("m")).hint == spec.hint
    assert spec.finding(Problem("m", hint="other")).hint == "other"
