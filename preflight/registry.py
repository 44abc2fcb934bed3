"""The check registry, in the style of Django's system checks: declare, select and run checks.

A check is a small function registered with a stable id, a tag (its concern, one of `Tags`),
a scope, one severity and hint, and whether its findings blame the hosts they name. It returns
`Problem`s; the registry turns them into `Finding`s carrying the check's id, severity, hint and
blame, so those live once, in the check.

    @check("ENV001", tag=Tags.ENV, scope=LOCAL, severity=Severity.ERROR, hint="unset it")
    def async_error_handling_disabled(facts: RankFacts, ctx: CheckContext) -> Iterable[Problem]:
        '''First line is the title; the whole docstring is `preflight explain ENV001`.'''

A check that does not apply where it runs (a GPU check without an NVIDIA driver) is *skipped*,
not passed: `@check(..., applies=predicate)` names a function of the check's own arguments that
returns the reason it does not apply (a short phrase like "no NVIDIA driver", shared by like
checks so reports can group them) or None; a check that finds out while running raises
`NotApplicable(reason)`. Either way its outcome is `Severity.SKIPPED` with the reason.

Local and cross checks are run by `run_checks`. Engine checks are what the engine itself
observed (a store that did not form, a hung probe); `@engine_check` returns an `EngineCheck`
the engine imports and calls by reference, with the check function's own typed signature:

    @engine_check("RUN003", tag=Tags.RUN, severity=Severity.COULD_NOT_RUN, hint="fix the errors")
    def probes_not_started(reason: str) -> Iterable[Problem]: ...

    state.findings += probes_not_started.report(reason="2 rank(s) did not report")
"""

from __future__ import annotations

import inspect
import re
import time
from collections.abc import Callable, Iterable, Sequence
from typing import Any, Generic, ParamSpec

from msgspec import Struct, field

from preflight.lib.deadline import call_with_deadline
from preflight.model import CheckOutcome, Finding, RankFacts, ReachabilityOutcome, Severity

LOCAL = "local"  # a pure function of one rank's facts, run on every rank
CROSS = "cross"  # a pure function of all ranks' facts, run on rank 0
ENGINE = "engine"  # raised by the runner itself (a rank missing, the store not forming)

_ID_PATTERN = re.compile(r"^[A-Z]{2,6}\d{3}$")
P = ParamSpec("P")


class Tags:
    """The concerns checks are grouped by: what `--only` and `--skip` name. Each is used by a check."""

    ENV = "env"
    GPU = "gpu"  # the health of the GPU each rank will use (NVML)
    # also switches the device probes on or off (matrix, copy, host link, correctness); they are part
    # of step 8, so `--skip probe` leaves them out too and `--only probe` keeps them
    GPU_PROBE = "gpu-probe"
    HISTORY = "history"  # this run against the recorded history (--history)
    LAYOUT = "layout"
    LIMITS = "limits"
    NCCL = "nccl"
    NETWORK = "network"  # also switches the reachability step on or off
    NIC = "nic"  # the health of the RDMA ports NCCL will use
    PORTS = "ports"
    PROBE = "probe"  # also switches the collective probes on or off
    RUN = "run"
    SOFTWARE = "software"
    STORAGE = "storage"  # the checkpoint path (--storage): also switches the storage family on or off
    WORLD = "world"

    @classmethod
    def all(cls) -> list[str]:
        """Every tag, sorted."""
        return sorted(value for name, value in vars(cls).items() if name.isupper())


class NotApplicable(Exception):
    """Raised by a check that does not apply here: its outcome is skipped, with this reason."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


Applicability = Callable[..., "str | None"]  # the check's own arguments -> why it does not apply, or None


class Problem(Struct):
    """What a check function returns: the parts of a finding that vary per occurrence."""

    message: str
    ranks: Sequence[int] = ()
    hosts: Sequence[str] = ()
    data: dict[str, Any] = field(default_factory=dict)
    hint: str | None = None  # None: the check's own hint
    # None: the check's own severity. A check with a graded rule (BW003: a straggler confirmed
    # below half its siblings is an error, above it a warning) sets it here, in the check.
    severity: Severity | None = None


class CheckContext(Struct):
    """What a local check may know about the job beyond its rank's facts: typed run settings."""

    world_size: int = 1
    backend: str = "auto"
    mesh: list[tuple[str, int]] = field(default_factory=list)  # resolved (name, size), outermost first


class JobView(CheckContext):
    """What a cross check receives, on rank 0: the whole job as one typed object.

    Every reporting rank's facts, the run settings, and what rank 0 learned while collecting:
    ranks claimed by more than one process (counted as neither), ranks that died after joining
    the store, and the reachability step's outcome
    (preflight/steps/tcp_reach.py; None when the step did not run).
    """

    ranks: list[RankFacts] = field(default_factory=list)
    duplicate_ranks: dict[int, list[tuple[str, int]]] = field(default_factory=dict)  # rank -> each claimant (host, pid)
    dead_ranks: list[int] = field(default_factory=list)  # died during the exchange (RUN008 names them)
    reachability: ReachabilityOutcome | None = None
    authenticated: bool = False  # every rank held the run secret: the store's values were proven (channel/run_auth.py)


class Grade(Struct, frozen=True):
    """A severity a check gives besides its own, and when: the one statement of its severity rule.

    `as_check`: the finding is then reported under another check's id (BW011 below a hardware
    profile is BW007, an error, under --strict-bandwidth)."""

    severity: Severity
    when: str
    as_check: str = ""


# How the flags change what any finding does to the exit code (the decision is steps/verdict.decide_exit_code).
SEVERITY_FLAGS = ("an error exits 3, could-not-run 4; a warning exits 0, or 1 with --strict; "
                  "--silence ID drops the check's findings")


class CheckSpec(Struct, frozen=True):
    """A registered check."""

    id: str
    tag: str
    scope: str
    severity: Severity
    hint: str
    func: Callable[..., Iterable[Problem]]
    blames_host: bool = False  # an error names a faulty host (to exclude), not the job's configuration
    applies: Applicability | None = None  # None: always applies
    context_only: bool = False  # its hosts are where a problem showed, not its culprits (no exclusion)
    grades: tuple[Grade, ...] = ()  # the other severities its findings may have, and when

    @property
    def severity_rule(self) -> str:
        """`warn; error when confirmed twice below 50% of its siblings' median`: what explain, docs/checks.md,
        the README's severity table and the help quote."""
        graded = [f"{g.severity.value} when {g.when}" + (f" (as {g.as_check})" if g.as_check else "")
                  for g in self.grades]
        return "; ".join([self.severity.value, *graded])

    @property
    def severity_names(self) -> str:
        """`warn or error`: every severity its findings may have, its own first (list, explain, docs/checks.md)."""
        return " or ".join(dict.fromkeys(s.value for s in self.severities))

    @property
    def severities(self) -> list[Severity]:
        """Every severity a finding of this check may have under its own id."""
        return [self.severity, *(g.severity for g in self.grades if not g.as_check)]

    def skip_reason(self, *args: Any) -> str | None:
        """Why this check does not apply to these arguments, or None when it does."""
        return self.applies(*args) if self.applies is not None else None

    @property
    def title(self) -> str:
        """The first line of the docstring."""
        return self.explanation.splitlines()[0] if self.explanation else self.func.__name__

    @property
    def explanation(self) -> str:
        """The whole docstring: what `preflight explain` prints."""
        return inspect.cleandoc(self.func.__doc__ or "")

    def finding(self, problem: Problem) -> Finding:
        """Turn one problem into a finding with this check's id, severity and hint.

        A problem's own severity must be one the check declares (`grades`): the rule is said once, in
        the check, and every view quotes it."""
        if problem.severity is not None and problem.severity not in self.severities:
            raise ValueError(f"{self.id}: severity {problem.severity.value} is not in its rule ({self.severity_rule})")
        return Finding(
            check_id=self.id,
            severity=self.severity if problem.severity is None else problem.severity,
            message=problem.message,
            hint=self.hint if problem.hint is None else problem.hint,
            ranks=sorted(set(problem.ranks)),
            hosts=sorted(set(problem.hosts)),
            data=dict(problem.data),
            blames_host=self.blames_host,
            context_only=self.context_only,
        )


class EngineCheck(Generic[P]):
    """An engine-scope check, called by reference: `probe_hang.report(hang, ...)`.

    `report` takes exactly the check function's typed parameters and returns its findings,
    so a renamed or missing argument fails at the call, on every call, not as a string id
    that is looked up only when the failure it reports happens.
    """

    def __init__(self, spec: CheckSpec) -> None:
        self.spec = spec

    @property
    def id(self) -> str:
        """The check's id, to recognise its findings: `f.check_id == probe_hang.id`."""
        return self.spec.id

    def report(self, *args: P.args, **kwargs: P.kwargs) -> list[Finding]:
        """The findings of what the engine observed."""
        return [self.spec.finding(problem) for problem in self.spec.func(*args, **kwargs)]

    def outcome(self, found: Iterable[Finding]) -> CheckOutcome:
        """This check's outcome among `found`: its worst finding's severity, OK when it found nothing."""
        mine = [f.severity for f in found if f.check_id == self.spec.id]
        status = max(mine, key=lambda s: s.rank, default=Severity.OK)
        return CheckOutcome(self.spec.id, self.spec.tag, self.spec.scope, self.spec.title, status)

    def __repr__(self) -> str:
        return f"EngineCheck({self.spec.id})"


_REGISTRY: dict[str, CheckSpec] = {}


def _register(check_id: str, tag: str, scope: str, severity: Severity, hint: str, blames_host: bool,
              func: Callable[..., Iterable[Problem]], applies: Applicability | None = None,
              context_only: bool = False, grades: Sequence[Grade] = ()) -> CheckSpec:
    if not func.__doc__:
        raise ValueError(f"check {check_id} needs a docstring: it is the explain text")
    existing = _REGISTRY.get(check_id)
    if existing is not None and existing.func.__qualname__ != func.__qualname__:
        raise ValueError(f"check id {check_id} registered twice")
    spec = CheckSpec(check_id, tag, scope, severity, hint, func, blames_host, applies, context_only, tuple(grades))
    _REGISTRY[check_id] = spec
    return spec


def _validate(check_id: str, tag: str) -> None:
    if not _ID_PATTERN.match(check_id):
        raise ValueError(f"check id {check_id!r} must look like ENV001")
    if tag not in Tags.all():
        raise ValueError(f"check {check_id}: unknown tag {tag!r}; the tags are registry.Tags: {', '.join(Tags.all())}")


def check(
    check_id: str, *, tag: str, scope: str, severity: Severity, hint: str, blames_host: bool = False,
    applies: Applicability | None = None, grades: Sequence[Grade] = (),
) -> Callable[[Callable[..., Iterable[Problem]]], Callable[..., Iterable[Problem]]]:
    """Register a local or cross check under a stable id; the function is returned unchanged.

    Ids are unique, the tag is one of `Tags`, the docstring is required. `blames_host`: an
    error from this check names faulty hosts, which the verdict lists for exclusion even when
    the finding names every host of the job. `applies`: takes the check's own arguments and
    returns why the check does not apply (its outcome is then skipped with that reason) or None.
    """
    _validate(check_id, tag)
    if scope not in (LOCAL, CROSS):
        raise ValueError(f"scope must be {LOCAL!r} or {CROSS!r}, not {scope!r} (engine checks use @engine_check)")

    def register(func: Callable[..., Iterable[Problem]]) -> Callable[..., Iterable[Problem]]:
        _register(check_id, tag, scope, severity, hint, blames_host, func, applies, grades=grades)
        return func

    return register


def engine_check(
    check_id: str, *, tag: str, severity: Severity, hint: str, blames_host: bool = False, context_only: bool = False,
    grades: Sequence[Grade] = (),
) -> Callable[[Callable[P, Iterable[Problem]]], EngineCheck[P]]:
    """Register an engine-scope check and return the `EngineCheck` the engine calls by reference.

    `context_only`: the hosts its findings name are where a problem showed, not its culprits
    (a slow group of a mesh dimension holds healthy hosts too; the localization checks name the
    culprit), so an error of it puts no host on the exclude list.

    The function's parameters are its interface to the engine: each must be annotated, and
    none may be *args or **kwargs, so every call is checked against the signature.
    """
    _validate(check_id, tag)

    def register(func: Callable[P, Iterable[Problem]]) -> EngineCheck[P]:
        for param in inspect.signature(func).parameters.values():
            if param.kind in (param.VAR_POSITIONAL, param.VAR_KEYWORD):
                raise ValueError(f"engine check {check_id}: *{param.name} is not a typed signature")
            if param.annotation is param.empty:
                raise ValueError(f"engine check {check_id}: parameter {param.name!r} needs a type annotation")
        return EngineCheck(_register(check_id, tag, ENGINE, severity, hint, blames_host, func,
                                     context_only=context_only, grades=grades))

    return register


def load_builtin_checks() -> None:
    """Import every module of preflight.checks so their decorators run."""
    import importlib
    import pkgutil

    import preflight.checks as package

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
    specs: Sequence[CheckSpec], subject: RankFacts | JobView, ctx: CheckContext, timeout_s: float, *, rank: int,
    host: str,
) -> tuple[list[Finding], list[CheckOutcome]]:
    """Run each check: a local one on (this rank's facts, ctx), a cross one on the JobView.

    A check that does not apply (its `applies` gives a reason, or it raises NotApplicable) is
    skipped with that reason and produces no finding."""
    findings: list[Finding] = []
    outcomes: list[CheckOutcome] = []
    for spec in specs:
        started = time.perf_counter()
        args = (subject,) if spec.scope == CROSS else (subject, ctx)

        def run(spec: CheckSpec = spec, args: tuple[Any, ...] = args) -> list[Problem] | NotApplicable:
            reason = spec.skip_reason(*args)
            if reason:
                return NotApplicable(reason)
            try:
                return list(spec.func(*args))
            except NotApplicable as skipped:
                return skipped

        outcome = call_with_deadline(run, timeout_s)
        elapsed = time.perf_counter() - started
        if outcome.ok and isinstance(outcome.value, NotApplicable):
            outcomes.append(CheckOutcome(spec.id, spec.tag, spec.scope, spec.title, Severity.SKIPPED,
                                         round(elapsed, 6), reason=outcome.value.reason))
            continue
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
                    ranks=[rank] if spec.scope == LOCAL else [],
                    hosts=[host] if spec.scope == LOCAL else [],
                )
            ]
        findings.extend(produced)
        status = max((f.severity for f in produced), key=lambda s: s.rank, default=Severity.OK)
        outcomes.append(CheckOutcome(spec.id, spec.tag, spec.scope, spec.title, status, round(elapsed, 6)))
    return findings, outcomes
