"""NCCL and torch.distributed settings on one rank that make a job hang or crawl:
async error handling, blocking wait, flight-recorder dumps, NCCL_DEBUG."""

from __future__ import annotations

from collections.abc import Iterable

from preflight.model import RankFacts, Severity
from preflight.registry import LOCAL, CheckContext, Problem, Tags, check

ASYNC = "TORCH_NCCL_ASYNC_ERROR_HANDLING"
LEGACY_ASYNC = "NCCL_ASYNC_ERROR_HANDLING"  # the pre-2.2 name, still read after the new one


def _here(facts: RankFacts, message: str, **data: object) -> Problem:
    return Problem(message, ranks=[facts.rank], hosts=[facts.host], data=dict(data))


def effective_async(facts: RankFacts) -> tuple[str, str] | None:
    """(variable, value) torch will use for async error handling: the new name wins."""
    for name in (ASYNC, LEGACY_ASYNC):
        value = facts.env.get(name)
        if value is not None and value.strip() != "":
            return name, value.strip()
    return None


def nccl_in_play(facts: RankFacts, ctx: CheckContext) -> bool:
    """NCCL settings matter: this torch has NCCL, or the run asked for the nccl backend."""
    return facts.versions.nccl_built == "yes" or ctx.backend == "nccl"


@check(
    "NCCL001",
    tag=Tags.NCCL,
    scope=LOCAL,
    severity=Severity.ERROR,
    hint="Unset TORCH_NCCL_ASYNC_ERROR_HANDLING or set it to 3 (the default: a timed-out collective "
    "kills the process, so the launcher ends the job); 2 aborts the communicator but keeps the process, "
    "only for code that handles the error itself. With 0 a stuck collective hangs the job until the "
    "scheduler kills it.",
)
def async_error_handling_disabled(facts: RankFacts, ctx: CheckContext) -> Iterable[Problem]:
    """TORCH_NCCL_ASYNC_ERROR_HANDLING=0 disables NCCL's watchdog teardown.

    With async error handling off, a collective that times out only logs; the process keeps
    waiting on the stuck communicator and the job hangs until its wall-clock limit, burning
    every GPU in the allocation. Valid values are 0-3. 3, PyTorch's default since 2.2, kills the
    process (without aborting the communicator first), as 1 does (after aborting it); only 2
    (clean up only) aborts the communicator and keeps the process. The legacy name
    NCCL_ASYNC_ERROR_HANDLING=0 counts when the new name is unset.
    """
    found = effective_async(facts)
    if found is not None and found[1] == "0":
        yield _here(facts, f"{found[0]}=0: a timed-out collective will hang instead of failing",
                    variable=found[0], value=found[1])


@check(
    "NCCL002",
    tag=Tags.NCCL,
    scope=LOCAL,
    severity=Severity.ERROR,
    hint="Set TORCH_NCCL_ASYNC_ERROR_HANDLING to 0-3, or unset it (3, the default, kills the process "
    "on a timeout; 2 keeps it).",
)
def async_error_handling_invalid(facts: RankFacts, ctx: CheckContext) -> Iterable[Problem]:
    """TORCH_NCCL_ASYNC_ERROR_HANDLING must be an integer from 0 to 3.

    0 = off, 1 = abort the communicator and kill the process, 2 = clean up only (abort the
    communicator, keep the process), 3 = kill the process without aborting the communicator
    (the default). torch parses the value with stoi: anything else raises at the first
    NCCL process group, on this rank only, and the other ranks wait for it.
    """
    for name in (ASYNC, LEGACY_ASYNC):
        value = facts.env.get(name)
        if value is None or value.strip() == "":
            continue
        if value.strip() not in ("0", "1", "2", "3"):
            yield _here(facts, f"{name}={value!r} is not one of 0, 1, 2, 3", variable=name, value=value)


@check(
    "NCCL003",
    tag=Tags.NCCL,
    scope=LOCAL,
    severity=Severity.WARN,
    hint="Rename NCCL_ASYNC_ERROR_HANDLING to TORCH_NCCL_ASYNC_ERROR_HANDLING in the job script.",
)
def legacy_async_error_handling(facts: RankFacts, ctx: CheckContext) -> Iterable[Problem]:
    """The deprecated NCCL_ASYNC_ERROR_HANDLING is set.

    PyTorch 2.2 renamed it TORCH_NCCL_ASYNC_ERROR_HANDLING; the old name is still read when
    the new one is unset, with a deprecation warning, and may be dropped in a later release,
    silently changing how this job reacts to a hang.
    """
    value = facts.env.get(LEGACY_ASYNC)
    if value is not None:
        yield _here(facts, f"{LEGACY_ASYNC}={value} is deprecated (use {ASYNC})", variable=LEGACY_ASYNC)


@check(
    "NCCL004",
    tag=Tags.NCCL,
    scope=LOCAL,
    severity=Severity.ERROR,
    hint="Set only TORCH_NCCL_ASYNC_ERROR_HANDLING; the legacy name is ignored when both are set.",
)
def async_error_handling_contradiction(facts: RankFacts, ctx: CheckContext) -> Iterable[Problem]:
    """NCCL_ASYNC_ERROR_HANDLING and TORCH_NCCL_ASYNC_ERROR_HANDLING are both set, differently.

    torch uses the new name and ignores the old one, so whoever set the legacy variable
    believes the job handles hangs in a way it does not (for example legacy 1, new 0).
    """
    new, old = facts.env.get(ASYNC), facts.env.get(LEGACY_ASYNC)
    if new is not None and old is not None and new.strip() != old.strip():
        yield _here(facts, f"{ASYNC}={new} but {LEGACY_ASYNC}={old}: torch uses {new}", new=new, legacy=old)


@check(
    "NCCL005",
    tag=Tags.NCCL,
    scope=LOCAL,
    severity=Severity.INFO,
    hint="Keep TORCH_NCCL_BLOCKING_WAIT only if you want the calling thread to raise after the "
    "process-group timeout; otherwise unset it and rely on async error handling.",
)
def blocking_wait(facts: RankFacts, ctx: CheckContext) -> Iterable[Problem]:
    """TORCH_NCCL_BLOCKING_WAIT=1: collectives block the caller until done or timed out.

    With blocking wait, `work.wait()` blocks the host thread and raises after the process
    group's timeout; it takes precedence over TORCH_NCCL_ASYNC_ERROR_HANDLING, whose watchdog
    then does not tear the communicator down. It also costs overlap of compute and
    communication. Not wrong, but it changes how a hang ends.
    """
    for name in ("TORCH_NCCL_BLOCKING_WAIT", "NCCL_BLOCKING_WAIT"):
        if facts.env.get(name, "").strip() == "1":
            async_value = effective_async(facts)
            current = f"{async_value[0]}={async_value[1]}" if async_value else "async error handling at its default"
            yield _here(facts, f"{name}=1 takes precedence over {current}", variable=name)


@check(
    "NCCL006",
    tag=Tags.NCCL,
    scope=LOCAL,
    severity=Severity.WARN,
    hint="Set TORCH_FR_BUFFER_SIZE (TORCH_NCCL_TRACE_BUFFER_SIZE before torch 2.5), e.g. 2000, "
    "so the flight recorder has entries to dump.",
)
def dump_without_buffer(facts: RankFacts, ctx: CheckContext) -> Iterable[Problem]:
    """TORCH_NCCL_DUMP_ON_TIMEOUT=1 without a flight-recorder buffer: the dump will be empty.

    On a timeout the watchdog dumps the flight recorder's ring buffer of recent collectives,
    the one artifact that shows which rank is stuck where. Its size is TORCH_FR_BUFFER_SIZE
    (formerly TORCH_NCCL_TRACE_BUFFER_SIZE); at 0, the default, nothing is recorded.
    """
    if facts.env.get("TORCH_NCCL_DUMP_ON_TIMEOUT", "").strip() != "1":
        return
    sizes = [facts.env.get(n, "").strip() for n in ("TORCH_FR_BUFFER_SIZE", "TORCH_NCCL_TRACE_BUFFER_SIZE")]
    if not any(size.isdigit() and int(size) > 0 for size in sizes):
        yield _here(facts, "TORCH_NCCL_DUMP_ON_TIMEOUT=1 but no TORCH_FR_BUFFER_SIZE: the dump will be empty")


@check(
    "NCCL007",
    tag=Tags.NCCL,
    scope=LOCAL,
    severity=Severity.INFO,
    hint="Set NCCL_DEBUG=WARN for production runs, NCCL_DEBUG=INFO (with NCCL_DEBUG_SUBSYS=INIT,NET) "
    "when debugging a hang: it logs the chosen interfaces, transports and rings.",
)
def nccl_debug_unset(facts: RankFacts, ctx: CheckContext) -> Iterable[Problem]:
    """NCCL_DEBUG is unset where NCCL is in use.

    Without NCCL_DEBUG, NCCL prints nothing, not even the warning that it fell back from
    InfiniBand to TCP sockets. Only checked when this torch has NCCL or --backend nccl.
    """
    if nccl_in_play(facts, ctx) and not facts.env.get("NCCL_DEBUG"):
        yield _here(facts, "NCCL_DEBUG is unset: NCCL will not say which transport or interface it chose")
