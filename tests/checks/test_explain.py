"""Every registered check is documented: `preflight explain ID` and `preflight list`."""

from __future__ import annotations

import pytest

from preflight.commands.explain import print_explanation
from preflight.registry import all_checks
from tests.helpers.ranks import run_cli

IDS = [spec.id for spec in all_checks()]


@pytest.mark.parametrize("check_id", IDS)
def test_every_check_has_explain_text(check_id: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert print_explanation(check_id.lower()) == 0
    out = capsys.readouterr().out
    spec = next(s for s in all_checks() if s.id == check_id)
    assert out.startswith(f"{check_id} [{spec.tag}, {spec.scope}, {spec.severity_names}]")
    assert len(spec.explanation.split()) >= 12, "explain text should say why, not only what"
    assert spec.hint and f"What to do: {spec.hint}" in out


def test_configuration_ids_are_listed_and_explained_by_the_cli() -> None:
    listed = run_cli(["list"])
    assert listed.returncode == 0
    for check_id in ("ENV001", "ENV003", "LAYOUT004", "NCCL013", "SW001", "SYS002"):
        assert check_id in listed.stdout
    explained = run_cli(["explain", "NCCL008"])
    assert explained.returncode == 0 and "`^`" in explained.stdout
