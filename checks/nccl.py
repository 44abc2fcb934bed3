"""NCCL and torch.distributed settings on one rank that make a job hang or crawl."""

from __future__ import annotations

from collections.abc import Iterable

from preflight.model import RankFacts, Severity
from preflight.registry import LOCAL, CheckContext, Problem, check


@check(
    "NCCL001",
    tag="nccl",
    scope=LOCAL,
    severity=Severity.ERROR,
    hint="Unset TORCH_NCCL_ASYNC_ERROR_HANDLING or set it to 3 (the default): with 0 a stuck "
    "collective hangs the job until the scheduler kills it.",
)
def async_error_handling_disabled(facts: RankFacts, ctx: CheckContext) -> Iterable[Problem]:
    """TORCH_NCCL_ASYNC_ERROR_HANDLING=0 disables NCCL's watchdog teardown.

    With async error handling off, a collective that times out only logs; the process keeps
    waiting on the stuck communicator and the job hangs until its wall-clock limit, burning
    every GPU in the allocation. Valid values are 0-3; 3 (tear down the communicator, keep the
    process) is PyTorch's default since 2.2.
    """
    value = facts.env.get("TORCH_NCCL_ASYNC_ERROR_HANDLING")
    if value is not None and value.strip() == "0":
        yield Problem(
            "TORCH_NCCL_ASYNC_ERROR_HANDLING=0: a timed-out collective will hang instead of failing",
            ranks=[facts.rank],
            hosts=[facts.host],
            data={"variable": "TORCH_NCCL_ASYNC_ERROR_HANDLING", "value": value},
        )
