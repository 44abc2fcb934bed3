"""`preflight list`, `preflight list --markdown` and `preflight explain ID`: the registry as documentation."""

from __future__ import annotations

import re

from tabulate import tabulate

from preflight import glossary
from preflight.lib.errors import BadInput
from preflight.registry import SEVERITY_FLAGS, all_checks, get_check


def print_list(markdown: bool = False) -> int:
    """Print every check: id, tag, scope, severity, title; or, with markdown, docs/checks.md."""
    if markdown:
        print(checks_markdown(), end="")
        return 0
    rows = [[s.id, s.tag, s.scope, s.severity_names, s.title] for s in all_checks()]
    print(tabulate(rows, headers=["id", "tag", "scope", "severity", "checks that"], tablefmt="simple"))
    return 0


def print_explanation(check_id: str) -> int:
    """Print one check's docstring and hint, or a term of the glossary (`preflight explain siblings`,
    `preflight explain glossary`); anything else is bad input."""
    if check_id.strip().lower() == glossary.TOPIC:
        print(glossary.text(), end="")
        return 0
    term = glossary.lookup(check_id)
    if term is not None:
        print(f"{check_id.strip().lower()}: {term}")
        return 0
    spec = get_check(check_id)
    if spec is None:
        raise BadInput(f"no check with id or term {check_id[:40]!r} (see `preflight list`, `preflight explain "
                       f"glossary`)")
    print(f"{spec.id} [{spec.tag}, {spec.scope}, {spec.severity_names}]")
    print(f"Severity: {spec.severity_rule}. {severity_flags()}.\n")
    print(spec.explanation)
    print(f"\nWhat to do: {spec.hint}")
    return 0


def severity_table() -> str:
    """The README's severity table: every check whose findings may have more than one severity, with its
    rule as the check states it (a test keeps the README equal to this)."""
    rows = [f"| {s.id} | {s.severity_rule} |" for s in all_checks() if s.grades]
    return "\n".join(["| check | severity |", "|---|---|", *rows]) + "\n"


def severity_flags() -> str:
    """What the exit code makes of a finding, and the flags that change it (the same for every check)."""
    return SEVERITY_FLAGS[0].upper() + SEVERITY_FLAGS[1:]


MARKDOWN_COMMAND = "preflight list --markdown > docs/checks.md"
SCOPES = {
    "local": "run on every rank, over that rank's own facts",
    "cross": "run on rank 0, over every rank's facts",
    "engine": "raised by the engine itself from what a step observed (a missing store, a hung probe)",
}


def _escape_prose(text: str) -> str:
    """Markdown-escape plain docstring text so it renders as written; `code spans` stay as they are."""
    parts = text.split("`")
    for i in range(0, len(parts), 2):  # the even parts lie outside backticks
        part = re.sub(r"([\\*\[\]<>|&])", r"\\\1", parts[i])
        parts[i] = re.sub(r"(?<![A-Za-z0-9])_|_(?![A-Za-z0-9])", r"\\_", part)
    escaped = "`".join(parts)
    # A line that would start a list, heading, quote or setext underline starts as text instead.
    escaped = re.sub(r"(?m)^([ \t]*)([-+](?=[ \t]|$)|#|=+[ \t]*$)", r"\1\\\2", escaped)
    return re.sub(r"(?m)^([ \t]*\d+)([.)])(?=[ \t]|$)", r"\1\\\2", escaped)


def checks_markdown() -> str:
    """docs/checks.md: every registered check, generated from the registry (`preflight list --markdown`)."""
    specs = all_checks()
    lines = [
        "# Checks",
        "",
        f"Generated from the check registry by `{MARKDOWN_COMMAND}`; a test fails when this file",
        "and the registry disagree. Each entry is what `preflight explain ID` prints.",
        "",
        "Scopes: " + "; ".join(f"**{scope}**: {what}" for scope, what in SCOPES.items()) + ".",
        "Tags select checks with `--only TAG` / `--skip TAG`; `--silence ID` drops one check's findings.",
        f"Severity: each entry's rule; then {_escape_prose(SEVERITY_FLAGS)}.",
        "",
        "| id | tag | scope | severity | checks that |",
        "|---|---|---|---|---|",
    ]
    lines += [f"| [{s.id}](#{s.id.lower()}) | {s.tag} | {s.scope} | {s.severity_names} | {_escape_prose(s.title)} |"
              for s in specs]
    for spec in specs:
        body = spec.explanation.split("\n", 1)[1].strip() if "\n" in spec.explanation else ""
        lines += ["", f"## {spec.id}", "", f"**{_escape_prose(spec.title)}**", "",
                  f"Tag `{spec.tag}`, scope {spec.scope}. Severity: {_escape_prose(spec.severity_rule)}.", ""]
        if body:
            lines += [_escape_prose(body), ""]
        lines.append(f"What to do: {_escape_prose(spec.hint)}")
    return "\n".join(lines) + "\n"
