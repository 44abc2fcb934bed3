"""Help a person can act on: every option of every subcommand says what it does, its default and
its valid values; the top-level help says where the run options are; usage errors are one line."""

from __future__ import annotations

import argparse
import json
import re
from pathlib import Path

import pytest

from preflight import glossary
from preflight.commands.cli import build_parser, main, shown_argv
from preflight.options import RunOptions
from preflight.registry import get_check
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
            assert action.option_strings and action.option_strings[0] in (
                "--verdict-file", "--sysfs-root", "--stdout-held"), name  # launch's and the tests' own, nothing else
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
    # An internal flag that takes no value leaves the next word in place.
    assert shown_argv(["run", "--stdout-held", "--mesh", "tp2"]) == ["run", "--mesh", "tp2"]


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



def _all_help() -> dict[str, str]:
    """Every help page: the top level and each subcommand's, as `--help` prints them."""
    parser = build_parser()
    return {"preflight": parser.format_help(), **{name: sub.format_help() for name, sub in _subparsers(parser).items()}}


@pytest.mark.parametrize("command", COMMANDS)
def test_every_subcommand_has_a_description_line(command: str) -> None:
    parser = build_parser()
    sub = _subparsers(parser)[command]
    assert sub.description and len(sub.description.split()) >= 8, command
    assert sub.format_help().split("\n\n")[1].strip().startswith(sub.description.split()[0])
    listed = parser.format_help()
    assert re.search(rf"^\s+{command}\s+\S", listed, re.M), f"{command} has no line in `preflight --help`"


def test_no_help_text_cites_a_file_the_wheel_does_not_ship() -> None:
    """A pip user has the package only: help points at `preflight explain TOPIC`, never at docs/*.md."""
    package = Path(__file__).resolve().parents[2] / "preflight"
    for name, text in _all_help().items():
        flat = " ".join(text.split())
        assert not re.search(r"\w\.md\b", flat), (name, re.findall(r"\S+\.md\b", flat))
        for path in re.findall(r"\b(?:docs|tests|sbatch|benchmarks|preflight)/[\w./-]*\w", flat):
            assert path.startswith("preflight/") and (package.parent / path).exists(), (name, path)
        for topic in re.findall(r"`preflight explain ([\w-]+)`", flat):  # every pointer leads somewhere
            assert topic == glossary.TOPIC or glossary.lookup(topic) or get_check(topic), (name, topic)


@pytest.mark.parametrize("word", ["engine", "siblings", "known-good", "could-not-run", "busbw", "straggler",
                                  "sustain", "localize", "expectations", "history"])
def test_words_a_newcomer_does_not_know_are_explained(word: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["explain", word]) == 0
    out = capsys.readouterr().out
    assert out.startswith(f"{word}: ") and len(out.split()) > 12
    assert main(["explain", "glossary"]) == 0 and f"\n{word}\n  " in "\n" + capsys.readouterr().out
    assert "sampled between the bursts" not in " ".join(" ".join(_all_help().values()).split())


def test_seconds_metavars_are_all_seconds() -> None:
    parser = build_parser()
    for name, sub in [("preflight", parser), *_subparsers(parser).items()]:
        for action in sub._actions:
            if action.dest.endswith("_s") and action.option_strings:
                assert action.metavar == "SECONDS", (name, action.option_strings)
    for name, text in _all_help().items():
        assert not re.findall(r"\b[A-Z_]+_S\b", text), name


def test_straggler_ratio_bounds_are_as_the_help_says(capsys: pytest.CaptureFixture[str]) -> None:
    assert "0 < RATIO <= 1" in " ".join(_all_help()["run"].split())
    assert RunOptions.build(straggler_ratio=1.0).probes.straggler_ratio == 1.0
    for bad in ("1.5", "0", "-0.2"):
        assert main(["run", "--straggler-ratio", bad]) == 2
        assert len(capsys.readouterr().err.strip().splitlines()) == 1


def test_a_mistyped_command_suggests_the_closest(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["lsit"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "did you mean `preflight list`?" in err
    assert main(["frobnicate"]) == 2 and "unknown command 'frobnicate'" in capsys.readouterr().err


def test_a_report_of_an_unknown_schema_is_refused_in_one_line(tmp_path: Path) -> None:
    from preflight.model import JobReport, ReportMeta
    from preflight.reports.json import dumps

    document = json.loads(dumps(JobReport(meta=ReportMeta("env", "", "r", 1, 1, "h", 1))))
    for schema in (99, 0):
        document["schema"] = schema
        path = tmp_path / f"s{schema}.json"
        path.write_text(json.dumps(document))
        done = run_cli(["report", str(path)], timeout=60)
        lines = done.stderr.strip().splitlines()
        assert done.returncode == 2 and len(lines) == 1 and f"schema {schema}" in lines[0], done.stderr
