"""docs/checks.md is generated from the registry (`preflight list --markdown`) and never stale."""

from __future__ import annotations

from pathlib import Path

from preflight.commands.explain import MARKDOWN_COMMAND, _escape_prose, checks_markdown
from preflight.registry import all_checks
from tests.helpers.ranks import run_cli

CHECKS_MD = Path(__file__).resolve().parents[2] / "docs" / "checks.md"


def test_docs_checks_md_is_the_generators_output() -> None:
    assert CHECKS_MD.read_text() == checks_markdown(), f"docs/checks.md is stale: run `{MARKDOWN_COMMAND}`"


def test_every_registered_check_has_a_row_and_a_section() -> None:
    text = checks_markdown()
    assert MARKDOWN_COMMAND in text.split("\n\n", 2)[1], "the regenerate command belongs at the top"
    specs = all_checks()
    assert len(specs) >= 50
    for spec in specs:
        assert f"| [{spec.id}](#{spec.id.lower()}) | {spec.tag} | {spec.scope} | {spec.severity_names} |" in text
        assert f"\n## {spec.id}\n" in text


def test_the_cli_prints_the_same_markdown() -> None:
    listed = run_cli(["list", "--markdown"])
    assert listed.returncode == 0, listed.stderr
    assert listed.stdout == checks_markdown()


def test_docstring_text_renders_as_written() -> None:
    assert _escape_prose("NCCL_* and <redacted> a|b, `x_* <y>` kept") == (
        "NCCL\\_\\* and \\<redacted\\> a\\|b, `x_* <y>` kept"
    )
    assert _escape_prose("- item\n2. step\n2.2 is a version\n--flag") == "\\- item\n2\\. step\n2.2 is a version\n--flag"
