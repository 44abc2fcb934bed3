"""Check registry in the style of Django's system checks.

A check is a small function registered with a stable id, a tag (its concern), a scope and
one severity and hint. It takes facts and returns `Problem`s; the registry turns them into
`Finding`s carrying the check's id, severity and hint, so those live once, in the check.

    @check("ENV001", tag="env", scope=LOCAL, severity=Severity.ERROR, hint="unset it")
    def async_error_handling_disabled(facts: RankFacts, ctx: CheckContext) -> Iterable[Problem]:
        '''First line is the title; the whole docstring is `preflight explain ENV001`.'''
"""

from __future__ import annotations

import inspect
import re
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from preflight.lib.deadline import call_with_deadline
from preflight.lib.errors import BadInput
from preflight.model import CheckOutcome, Finding, Severity

LOCAL = "local"  # a pure function of one rank's facts, run on every rank
CROSS = "cross"  # a pure function of all ranks' facts, run on rank 0
ENGINE = "engine"  # raised by the runner itself (a rank missing, the store not forming)

_ID_PATTERN = re.compile(r"^[A-Z]{2,6}\d{3}$")


@dataclass
class Problem:
    """What a check function returns: the parts of a finding that vary per occurrence."""

    message: str
    ranks: Sequence[int] = ()
    hosts: Sequence[str] = ()
    data: dict[str, Any] = field(default_factory=dict)
    hint: str | None = None  # None: the check's own hint


@dataclass
class CheckContext:
    """What a check may know about the job beyond facts: typed, never engine objects.

    Cross checks also get what rank 0 learned while collecting: ranks claimed by more than one
    process, and the reachability step's outcome (preflight/steps/tcp_reach.py).
    """

    world_size: int = 1
    backend: str = "auto"
    mesh: list[tuple[str, int]] = field(default_factory=list)  # resolved (name, size), outermost first
    duplicate_ranks: dict[int, list[str]] = field(default_factory=dict)  # rank -> every claimant's host
    reachability: dict[str, Any] | None = None


@dataclass(frozen=True)
class CheckSpec:
    """A registered check."""

    id: str
    tag: str
    scope: str
    severity: Severity
    hint: str
    func: Callable[..., Iterable[Problem]]

    @property
    def title(self) -> str:
        """The first line of the docstring."""
        return self.explanation.splitlines()[0] if self.explanation else self.func.__name__

    @property
    def explanation(self) -> str:
        """The whole docstring: what `preflight explain` prints."""
        return inspect.cleandoc(self.func.__doc__ or "")

    def finding(self, problem: Problem) -> Finding:
        """Turn one problem into a finding with this check's id, severity and hint."""
        return Finding(
            check_id=self.id,
            severity=self.severity,
            message=problem.message,
            hint=self.hint if problem.hint is None else problem.hint,
            ranks=sorted(set(problem.ranks)),
            hosts=sorted(set(problem.hosts)),
            data=dict(problem.data),
        )


_REGISTRY: dict[str, CheckSpec] = {}


def check(
    check_id: str, *, tag: str, scope: str, severity: Severity, hint: str
) -> Callable[[Callable[..., Iterable[Problem]]], Callable[..., Iterable[Problem]]]:
    """Register a check function under a stable id. Ids are unique; the docstring is required."""
    if not _ID_PATTERN.match(check_id):
        raise ValueError(f"check id {check_id!r} must look like ENV001")
    if scope not in (LOCAL, CROSS, ENGINE):
        raise ValueError(f"scope must be {LOCAL!r}, {CROSS!r} or {ENGINE!r}, not {scope!r}")

    def register(func: Callable[..., Iterable[Problem]]) -> Callable[..., Iterable[Problem]]:
        if not func.__doc__:
            raise ValueError(f"check {check_id} needs a docstring: it is the explain text")
        existing = _REGISTRY.get(check_id)
        if existing is not None and existing.func.__qualname__ != func.__qualname__:
            raise ValueError(f"check id {check_id} registered twice")
        _REGISTRY[check_id] = CheckSpec(check_id, tag, scope, severity, hint, func)
        return func

    return register


def load_builtin_checks() -> None:
    """Import every module of preflight.checks so their decorators run."""
    import importlib
    import pkgutil

    try:
        import preflight.checks as package
    except ModuleNotFoundError:
        import preflight

        raise BadInput(
            f"preflight was imported from the source folder {preflight.__path__[0]}, which lacks the "
            "installed layout's checks/reports subpackages; run from another directory, or `pip install -e .`"
        ) from None

    for module in pkgutil.iter_modules(package.__path__):
        importlib.import_module(f"{package.__name__}.{module.name}")


def all_checks() -> list[CheckSpec]:
    """Every registered check, by id."""
    load_builtin_checks()
    return [_REGISTRY[k] for k in sorted(_REGISTRY)]


def get_check(check_id: str) -> CheckSpec | None:
    """The check with this id (case-insensitive), or None."""
    load_builtin_checks()
    return _REGISTRY.get(check_id.upper())


def engine_findings(check_id: str, **details: Any) -> list[Finding]:
    """Findings of an engine-scope check, which the runner calls with what it observed."""
    spec = get_check(check_id)
    if spec is None or spec.scope != ENGINE:
        raise KeyError(f"{check_id} is not an engine check")
    return [spec.finding(problem) for problem in spec.func(**details)]


def all_tags() -> list[str]:
    """Every tag in use."""
    return sorted({spec.tag for spec in all_checks()})


def select_checks(
    scope: str, only_tags: Sequence[str] = (), skip_tags: Sequence[str] = ()
) -> list[CheckSpec]:
    """The checks of one scope that `--only` / `--skip` leave in."""
    chosen = []
    for spec in all_checks():
        if spec.scope != scope:
            continue
        if only_tags and spec.tag not in only_tags:
            continue
        if spec.tag in skip_tags:
            continue
        chosen.append(spec)
    return chosen

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
