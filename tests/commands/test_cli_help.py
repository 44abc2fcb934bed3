"""Help a person can act on: every option of every subcommand says what it does, its default and
its valid values; the top-level help says where the run options are; usage errors are one line."""

from __future__ import annotations

import argparse
from pathlib import Path

import pytest

from preflight.commands.cli import build_parser, shown_argv
from tests.helpers.ranks import read_json, run_cli

COMMANDS = ("run", "launch", "report", "list", "explain", "history")


def _subparsers(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    action = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    return dict(action.choices)


def _documented(parser: argparse.ArgumentParser) -> list[argparse.Action]:
    return [a for a in parser._actions if not isinstance(a, (argparse._HelpAction, argparse._VersionAction,
                                                             argparse._SubParsersAction))]


@pytest.mark.parametrize("command", COMMANDS)
def test_every_option_has_help_with_its_default_and_valid_values(command: str) -> None:
    sub = _subparsers(build_parser())[command]
    missing = []
    for action in _documented(sub):
        name = "/".join(action.option_strings) or action.dest
        if action.help == argparse.SUPPRESS:
            assert action.option_strings and action.option_strings[0] in ("--verdict-file", "--sysfs-root"), name
            continue
        text = action.help or ""
        if len(text.split()) < 3:
            missing.append(f"{name}: no help")
            continue
        if action.option_strings and "default" not in text:  # positionals have no default
            missing.append(f"{name}: help does not state its default")
        for choice in action.choices or ():
            if str(choice) not in text:
                missing.append(f"{name}: help does not name the valid value {choice!r}")
    assert missing == [], missing


def test_the_walk_fails_on_an_option_without_help() -> None:
    """The walk above would catch a new flag added without help (checked on a copy of the parser)."""
    sub = _subparsers(build_parser())["run"]
    sub.add_argument("--new-flag", default=3)
    bare = [a for a in _documented(sub) if a.help is None]
    assert [a.dest for a in bare] == ["new_flag"]


def test_top_level_help_says_where_the_run_options_are() -> None:
    proc = run_cli(["--help"], timeout=60)
    assert proc.returncode == 0 and "`preflight run --help`" in proc.stdout and "--mesh" in proc.stdout
    run_help = run_cli(["run", "--help"], timeout=60).stdout
    for flag in ("--mesh", "--sizes", "--ops", "--expect", "--warmup", "--iters", "--straggler-ratio", "--backend"):
        assert flag in run_help
    assert "all_gather" in run_help and "1M = 1 MiB = 1,048,576" in run_help


@pytest.mark.parametrize("args", [["launch", "-n", "0"], ["launch", "--nproc"], ["--no-such-flag"],
                                  ["report"], ["run", "--backend", "mpi"], ["explain"]])
def test_a_usage_error_is_one_line(args: list[str]) -> None:
    proc = run_cli(args, timeout=60)
    assert proc.returncode == 2
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and "error:" in lines[0] and "--help" in lines[0], proc.stderr


def test_internal_flags_are_not_in_the_shown_command_line() -> None:
    assert shown_argv(["launch", "-n", "2", "--verdict-file", "/tmp/x", "--sysfs-root=/f", "--mesh", "tp2"]) == [
        "launch", "-n", "2", "--mesh", "tp2"]


def test_sizes_1m_is_1048576_bytes_in_the_json(tmp_path: Path) -> None:
    """nccl-tests' units: `--sizes 1M` is 1 MiB, recorded as 1,048,576 bytes."""
    out = tmp_path / "r.json"
    proc = run_cli(["launch", "-n", "2", "--backend", "gloo", "--sizes", "1M", "--ops", "all_reduce", "--warmup",
                    "0", "--iters", "1", "--only", "probe", "--json", str(out)], timeout=180)
    assert out.exists(), proc.stdout + proc.stderr
    assert {p["size_bytes"] for p in read_json(out)["probes"]} == {1_048_576}
    assert "1 MiB" in proc.stdout  # every figure with its unit
    # Re-rendering says what it wrote; a missing file is said plainly.
    again = run_cli(["report", str(out), "--html", str(tmp_path / "r.html")], timeout=60)
    assert f"preflight: wrote html report {tmp_path / 'r.html'}" in again.stderr and (tmp_path / "r.html").exists()
    nope = tmp_path / "nope.json"
    missing = run_cli(["report", str(nope)], timeout=60)
    assert missing.returncode == 2 and missing.stderr.strip() == f"preflight: error: {nope}: no such file"


def test_explain_states_the_severity_rule() -> None:
    proc = run_cli(["explain", "BW003"], timeout=60)
    assert proc.returncode == 0
    words = " ".join(proc.stdout.split())
    assert "confirmed twice below 50% of its siblings' median (both passes) is an ERROR, exit 3" in words
    assert "tests/" not in proc.stdout  # explain speaks to users, not about the test suite

