"""Folding the ranks' check results: one finding per fault naming every rank, the worst outcome per check."""

from __future__ import annotations

from preflight.model import CheckOutcome, Finding, Severity
from preflight.steps.check_results import merge_findings, merge_outcomes


def test_merge_folds_the_same_finding_from_many_ranks() -> None:
    findings = [Finding("X001", Severity.WARN, "same", "h", [r], [f"n{r % 2}"]) for r in range(4)]
    findings.append(Finding("X001", Severity.WARN, "other", "h", [9], ["n9"]))
    merged = merge_findings(findings)
    assert len(merged) == 2
    same = next(f for f in merged if f.message == "same")
    assert same.ranks == [0, 1, 2, 3] and same.hosts == ["n0", "n1"]


def test_merge_outcomes_keeps_the_worst_status() -> None:
    outcomes = [CheckOutcome("X001", "t", "local", "t", Severity.OK), CheckOutcome("X001", "t", "local", "t",
                                                                                  Severity.ERROR)]
    assert [o.status for o in merge_outcomes(outcomes)] == [Severity.ERROR]


def test_merged_outcome_is_skipped_only_where_every_rank_skipped() -> None:
    skipped = CheckOutcome("X001", "t", "local", "t", Severity.SKIPPED, reason="no NVIDIA driver")
    ran = CheckOutcome("X001", "t", "local", "t", Severity.OK)
    assert [(o.status, o.reason) for o in merge_outcomes([skipped, skipped])] == [(Severity.SKIPPED,
                                                                                   "no NVIDIA driver")]
    assert [(o.status, o.reason) for o in merge_outcomes([skipped, ran])] == [(Severity.OK, "")]
