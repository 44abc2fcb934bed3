"""Severity said once (issue 45, item 4): a finding's severity comes from its check's declared rule, and
`explain`, `list`, docs/checks.md, the glossary, the help and the README quote that rule."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from preflight import glossary
from preflight.commands.cli import build_parser
from preflight.commands.explain import print_explanation, severity_table
from preflight.model import Severity
from preflight.registry import Problem, all_checks, get_check

README = Path(__file__).resolve().parents[2] / "README.md"
GRADED = [spec.id for spec in all_checks() if spec.grades]


def test_the_readme_severity_table_is_the_registrys() -> None:
    assert {"BW003", "BW004", "BW011", "STO004", "STO005"} <= set(GRADED)
    assert severity_table() in README.read_text(), "README's Severity table is stale: paste severity_table()"


@pytest.mark.parametrize("check_id", GRADED)
def test_explain_prints_the_rule_the_findings_follow(check_id: str, capsys: pytest.CaptureFixture[str]) -> None:
    spec = get_check(check_id)
    assert print_explanation(check_id) == 0
    head = capsys.readouterr().out.splitlines()[:2]
    assert head[0] == f"{check_id} [{spec.tag}, {spec.scope}, {spec.severity_names}]"
    assert head[1].startswith(f"Severity: {spec.severity_rule}. ")
    # Each severity the rule names is one the check's findings may have: `explain BW004` never says
    # `warn` alone for a check that errs.
    named = {spec.severity.value, *(g.severity.value for g in spec.grades)}
    assert named == set(re.findall(r"(?:^|; )(\w+(?:-\w+)*)", spec.severity_rule))


def test_a_severity_outside_the_checks_rule_is_refused() -> None:
    spec = get_check("BW007")
    with pytest.raises(ValueError, match="not in its rule"):
        spec.finding(Problem("m", severity=Severity.WARN))
    assert get_check("BW003").finding(Problem("m", severity=Severity.ERROR)).severity == Severity.ERROR


def test_the_glossary_and_the_help_quote_the_same_rules() -> None:
    expectations = glossary.lookup("expectations") or ""
    assert f"BW007 is {get_check('BW007').severity_rule}." in expectations
    assert f"BW011 is {get_check('BW011').severity_rule}." in expectations
    assert f"BW003 is {get_check('BW003').severity_rule}." in (glossary.lookup("straggler") or "")
    helps = " ".join(build_parser().format_help().split())
    run_help = " ".join(next(a for a in build_parser()._subparsers._group_actions[0].choices.items()
                             if a[0] == "run")[1].format_help().split())
    for text in (helps + run_help,):
        assert "below 0.9x its hardware profile is an error (BW007), not a warning (BW011)" in text
        assert "below 0.9x is an error" in text  # --expect: BW007 is an error
    assert get_check("BW007").severity == Severity.ERROR and get_check("BW011").severity == Severity.WARN
