"""Steps 3 and 5: run the selected checks, each under a deadline, and merge their findings.

A check that raises or overruns `--check-timeout` becomes a could-not-run finding with the
reason: never a pass, never a crash of the run.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Sequence
from typing import Any

from preflight.deadline import call_with_deadline
from preflight.model import CheckOutcome, Finding, Severity
from preflight.registry import CheckContext, CheckSpec


def run_checks(
    specs: Sequence[CheckSpec], subject: Any, ctx: CheckContext, timeout_s: float, *, rank: int, host: str
) -> tuple[list[Finding], list[CheckOutcome]]:
    """Run each check on `subject` (one RankFacts, or the list of all ranks' facts)."""
    findings: list[Finding] = []
    outcomes: list[CheckOutcome] = []
    for spec in specs:
        started = time.perf_counter()
        outcome = call_with_deadline(lambda spec=spec: list(spec.func(subject, ctx)), timeout_s)
        elapsed = time.perf_counter() - started
        if outcome.ok:
            produced = [spec.finding(problem) for problem in outcome.value]
        else:
            produced = [
                Finding(
                    check_id=spec.id,
                    severity=Severity.COULD_NOT_RUN,
                    message=f"{spec.id} ({spec.title}) could not run: {outcome.reason(timeout_s)}",
                    hint="This check gave no answer; its condition is unverified. "
                    "See the reason, or raise --check-timeout.",
                    ranks=[rank] if spec.scope == "local" else [],
                    hosts=[host] if spec.scope == "local" else [],
                )
            ]
        findings.extend(produced)
        status = max((f.severity for f in produced), key=lambda s: s.rank, default=Severity.OK)
        outcomes.append(CheckOutcome(spec.id, spec.tag, spec.scope, spec.title, status, round(elapsed, 6)))
    return findings, outcomes


def merge_findings(findings: Iterable[Finding]) -> list[Finding]:
    """Fold the same finding from many ranks into one naming all of them."""
    merged: dict[tuple[str, str, str, str], Finding] = {}
    for finding in findings:
        key = (finding.check_id, finding.severity.value, finding.message, finding.hint)
        if key not in merged:
            merged[key] = Finding(
                finding.check_id, finding.severity, finding.message, finding.hint,
                list(finding.ranks), list(finding.hosts), dict(finding.data),
            )
            continue
        target = merged[key]
        target.ranks = sorted(set(target.ranks) | set(finding.ranks))
        target.hosts = sorted(set(target.hosts) | set(finding.hosts))
    return sorted(merged.values(), key=lambda f: (-f.severity.rank, f.check_id, f.message))


def merge_outcomes(outcomes: Iterable[CheckOutcome]) -> list[CheckOutcome]:
    """One outcome per check id: the worst status any rank saw, the longest duration."""
    merged: dict[str, CheckOutcome] = {}
    for outcome in outcomes:
        known = merged.get(outcome.check_id)
        if known is None:
            merged[outcome.check_id] = CheckOutcome(**vars(outcome))
            continue
        if outcome.status.rank > known.status.rank:
            known.status = outcome.status
        known.duration_s = max(known.duration_s, outcome.duration_s)
    return [merged[k] for k in sorted(merged)]
