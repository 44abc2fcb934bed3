"""The ranks' check results folded into the report's: one finding per fault, one outcome per check.

Every rank runs its local checks and rank 0 the cross checks (preflight/registry.py); the same
finding comes from many ranks and each check has an outcome per rank. The verdict (steps/verdict.py)
folds them here: a finding naming every rank and host that raised it, an outcome with the worst
status any rank saw, and an outcome for every check the run's `--only` / `--skip` leave in, so
that JUnit's testcases are the same set on every run of the same options.
"""

from __future__ import annotations

import copy
from collections.abc import Iterable, Mapping, Sequence

from preflight.model import CheckOutcome, Finding, Severity, culprit_order
from preflight.registry import ENGINE, Tags, all_checks


def merge_findings(findings: Iterable[Finding]) -> list[Finding]:
    """Fold the same finding from many ranks into one naming all of them.

    O(total ranks and hosts named): each merged finding's ranks and hosts are gathered in sets
    and sorted once at the end, not re-sorted per folded finding."""
    merged: dict[tuple[str, str, str, str], Finding] = {}
    folded: dict[tuple[str, str, str, str], tuple[set[int], set[str]]] = {}
    for finding in findings:
        key = (finding.check_id, finding.severity.value, finding.message, finding.hint)
        if key not in merged:
            merged[key] = Finding(
                finding.check_id, finding.severity, finding.message, finding.hint,
                list(finding.ranks), list(finding.hosts), dict(finding.data), finding.blames_host,
                finding.context_only,
            )
            continue
        if key not in folded:
            folded[key] = (set(merged[key].ranks), set(merged[key].hosts))
        ranks, hosts = folded[key]
        ranks.update(finding.ranks)
        hosts.update(finding.hosts)
    for key, (ranks, hosts) in folded.items():
        merged[key].ranks = sorted(ranks)
        merged[key].hosts = sorted(hosts)
    return sorted(merged.values(), key=culprit_order)  # the one order every view shows


def merge_outcomes(outcomes: Iterable[CheckOutcome]) -> list[CheckOutcome]:
    """One outcome per check id: the worst status any rank saw, the longest duration.

    Skipped ranks below OK: a check skipped on some ranks and run on others ran; the reason is
    kept only while every rank skipped it."""
    merged: dict[str, CheckOutcome] = {}
    for outcome in outcomes:
        known = merged.get(outcome.check_id)
        if known is None:
            merged[outcome.check_id] = copy.copy(outcome)
            continue
        if outcome.status.rank > known.status.rank:
            known.status = outcome.status
            known.reason = outcome.reason if outcome.status == Severity.SKIPPED else ""
        known.duration_s = max(known.duration_s, outcome.duration_s)
    return [merged[k] for k in sorted(merged)]


def every_selected_outcome(outcomes: Iterable[CheckOutcome], findings: Iterable[Finding], only_tags: Sequence[str],
                           skip_tags: Sequence[str], not_run: Mapping[str, str]) -> list[CheckOutcome]:
    """One outcome for every check `--only` / `--skip` leave in, engine checks included: the same
    set on every run of the same options (JUnit's testcases must not appear and vanish).

    An engine check is raised only when what it watches happens, so one with no outcome has
    its findings' worst severity, or OK (it watched and saw nothing), or SKIPPED when its tag's
    step did not run this time (`not_run`: tag -> why, e.g. the probes when the run stopped
    before step 8)."""
    merged = {o.check_id: o for o in merge_outcomes(outcomes)}
    worst: dict[str, Severity] = {}
    for finding in findings:
        known = worst.get(finding.check_id, Severity.OK)
        worst[finding.check_id] = finding.severity if finding.severity.rank > known.rank else known
    # A tag whose every check that ran here was skipped (no NVIDIA driver, no RDMA port): its engine
    # checks (GPU040's XID events, NIC001's counters) watched nothing either.
    by_tag: dict[str, list[CheckOutcome]] = {}
    for outcome in merged.values():
        by_tag.setdefault(outcome.tag, []).append(outcome)
    not_run = {**{tag: tagged[0].reason for tag, tagged in by_tag.items()
                  if all(o.status == Severity.SKIPPED for o in tagged)}, **not_run}
    for spec in all_checks():
        if spec.id in merged:
            continue
        if spec.id in worst:  # a finding's check is listed whatever the selection (RUN checks always speak)
            merged[spec.id] = CheckOutcome(spec.id, spec.tag, spec.scope, spec.title, worst[spec.id])
        elif spec.tag != Tags.RUN and ((only_tags and spec.tag not in only_tags) or spec.tag in skip_tags):
            continue  # the run's own checks (RUN*) watch every run, whatever the selection
        elif spec.scope == ENGINE and spec.tag in not_run:
            merged[spec.id] = CheckOutcome(spec.id, spec.tag, spec.scope, spec.title, Severity.SKIPPED,
                                           reason=not_run[spec.tag])
        elif spec.scope == ENGINE:
            merged[spec.id] = CheckOutcome(spec.id, spec.tag, spec.scope, spec.title, Severity.OK)
    return [merged[k] for k in sorted(merged)]
