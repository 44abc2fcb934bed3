"""`preflight list` and `preflight explain ID`: the registry as documentation."""

from __future__ import annotations

from tabulate import tabulate

from preflight.lib.errors import BadInput
from preflight.registry import all_checks, get_check


def print_list() -> int:
    """Print every check: id, tag, scope, severity, title."""
    rows = [[s.id, s.tag, s.scope, s.severity.value, s.title] for s in all_checks()]
    print(tabulate(rows, headers=["id", "tag", "scope", "severity", "checks that"], tablefmt="simple"))
    return 0


def print_explanation(check_id: str) -> int:
    """Print one check's docstring and hint; unknown ids are bad input."""
    spec = get_check(check_id)
    if spec is None:
        raise BadInput(f"no check with id {check_id!r} (see `preflight list`)")
    print(f"{spec.id} [{spec.tag}, {spec.scope}, {spec.severity.value}]\n")
    print(spec.explanation)
    print(f"\nWhat to do: {spec.hint}")
    return 0
