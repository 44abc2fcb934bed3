"""The options table is the one source: every CLI flag, API keyword, RunOptions field and docs entry
comes from or matches one row (preflight/options/table.py)."""

from __future__ import annotations

import argparse
import inspect
import re
from pathlib import Path

import msgspec
import pytest

import preflight
from preflight.commands.cli import build_parser
from preflight.lib.errors import BadInput
from preflight.options import (
    API_OPTIONS,
    BY_NAME,
    GROUPS,
    OPTIONS,
    DeviceOptions,
    ProbeOptions,
    RunHistory,
    RunOptions,
    Timeouts,
    option_name,
)
from preflight.options.table import help_values, markdown

DOCS = Path(__file__).resolve().parent.parent / "docs"
LAUNCH_ONLY = {"--nproc", "--start-method"}  # launch's own flags, not run options
NOT_OPTIONS = {"command_line"}  # the one RunOptions field no flag sets


def _subcommand(command: str) -> argparse.ArgumentParser:
    parser = build_parser()
    return next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction)).choices[command]


def _run_actions(sub: argparse.ArgumentParser) -> list[argparse.Action]:
    return [a for a in sub._actions if a.option_strings and not isinstance(a, argparse._HelpAction)
            and not LAUNCH_ONLY & set(a.option_strings)]


def _group_title(sub: argparse.ArgumentParser, action: argparse.Action) -> str:
    return next(str(group.title) for group in sub._action_groups if action in group._group_actions)


@pytest.mark.parametrize("command", ["run", "launch"])
def test_every_flag_of_a_run_is_one_row_with_its_default_help_and_group(command: str) -> None:
    sub = _subcommand(command)
    actions = _run_actions(sub)
    assert sorted(a.option_strings[0] for a in actions) == sorted(o.flag for o in OPTIONS)
    values = help_values()
    for action in actions:
        row = next(o for o in OPTIONS if o.flag == action.option_strings[0])
        assert action.dest == row.name and action.default == row.default, row.flag
        assert action.help == (argparse.SUPPRESS if row.internal else row.help_text(values)), row.flag
        assert _group_title(sub, action) == GROUPS[row.group], row.flag
        assert (action.choices or ()) == row.kind.choices, row.flag


def test_run_help_shows_the_groups_in_the_tables_order() -> None:
    """`preflight run --help` is grouped by the table's groups, each flag under its own."""
    help_text = _subcommand("run").format_help()
    positions = [help_text.index(f"\n{title}:") for title in GROUPS.values()]
    assert positions == sorted(positions)
    for row in OPTIONS:
        if not row.internal:
            at = help_text.index(f"  {row.flag}")
            group_start = max(p for p in positions if p < at)
            assert group_start == help_text.index(f"\n{GROUPS[row.group]}:"), row.flag


def test_the_apis_keywords_and_defaults_are_the_tables() -> None:
    parameters = inspect.signature(preflight.check).parameters
    keywords = {name: p.default for name, p in parameters.items() if name not in ("mesh", "on_failure")}
    assert keywords == {o.name: o.default for o in API_OPTIONS}
    for row in API_OPTIONS:
        assert f"{row.name}={row.default!r}: {row.flag}" in (preflight.check.__doc__ or "")


def test_the_api_refuses_a_keyword_that_is_no_row() -> None:
    """A keyword outside the table is a TypeError, as for any Python function (before any rank waits)."""
    import torch.distributed as dist

    store = dist.HashStore()
    dist.init_process_group("gloo", store=store, rank=0, world_size=1)
    try:
        with pytest.raises(TypeError, match="unexpected keyword argument 'timeout'"):
            preflight.check(timeout=5)
        with pytest.raises(TypeError, match="unexpected keyword argument 'mesh_text'"):
            preflight.check(mesh_text="tp2")
    finally:
        dist.destroy_process_group()


def test_every_run_options_field_is_set_by_a_row() -> None:
    """A field no row sets would be an option only some callers could give; every row's field exists."""
    fields = {f.name for f in msgspec.structs.fields(RunOptions)}
    assert fields - NOT_OPTIONS == {name for o in OPTIONS for name in o.roots}
    for part in (Timeouts, ProbeOptions, DeviceOptions, RunHistory):  # and every field of a part is a row's
        prefix = next(name for name in fields if isinstance(getattr(RunOptions(), name), part))
        targets = {t.partition(".")[2] for o in OPTIONS for t in ((o.target,) if o.target else o.sets)
                   if t.startswith(f"{prefix}.")}
        assert {f.name for f in msgspec.structs.fields(part)} - {"world_size"} == targets, part


@pytest.mark.parametrize("row", OPTIONS, ids=[o.flag for o in OPTIONS])
def test_a_value_of_the_wrong_type_is_refused_naming_the_row(row: object) -> None:
    """Every row is validated where RunOptions is built, and the message names it."""
    assert isinstance(row, type(OPTIONS[0]))
    with pytest.raises(BadInput) as raised:
        RunOptions.build(**{row.name: object()})
    assert row.flag in str(raised.value) or row.name in str(raised.value)


def test_a_default_from_the_table_is_the_default_everywhere() -> None:
    """RunOptions() and RunOptions.build() agree with the table: one place says --timeout is 60 s."""
    built, bare = RunOptions.build(), RunOptions()
    for row in OPTIONS:
        if row.target and row.env is None:
            assert _at(built, row.target) == _at(bare, row.target) == row.default, row.flag
    assert option_name("timeout_s") == "timeout_s (--timeout)"
    assert option_name("flaky_window") == "flaky_window (--flaky)"


def _at(options: RunOptions, dotted: str) -> object:
    value: object = options
    for part in dotted.split("."):
        value = getattr(value, part)
    return value


def test_a_name_that_moved_into_a_part_says_where_it_is_now() -> None:
    """Code written before the parts (a merge) fails with the new place in the message, not a bare AttributeError."""
    with pytest.raises(AttributeError, match=r"options\.timeouts\.run_s"):
        RunOptions().timeout_s  # noqa: B018
    with pytest.raises(AttributeError, match=r"options\.probes\.mesh"):
        RunOptions().mesh  # noqa: B018


@pytest.mark.parametrize(("part", "fields", "says"), [
    (Timeouts, {"run_s": "60"}, "timeout_s (--timeout) must be a number of seconds, not str"),
    (Timeouts, {"probe_s": 0}, "probe_timeout_s (--probe-timeout)=0: must be above 0"),
    (ProbeOptions, {"warmup": -1}, "warmup (--warmup)=-1: must be 0 to"),
    (ProbeOptions, {"expect": {"ep": 1.0}, "world_size": 4}, "--expect ep=...: no mesh dimension 'ep'"),
    (DeviceOptions, {"budget_s": True}, "device_budget_s (--device-budget) must be a number of seconds, not bool"),
    (RunHistory, {"flaky_failures": 5, "flaky_window": 2}, "--flaky 5/2: K/N with 1 <= K <= N"),
])
def test_each_part_validates_itself_where_it_is_built(part: type, fields: dict, says: str) -> None:
    """ParallelDims-style: a part built directly (not only through RunOptions.build) checks its rows."""
    with pytest.raises(BadInput, match=re.escape(says)):
        part(**fields)


def test_docs_options_page_is_the_table() -> None:
    page = (DOCS / "options.md").read_text()
    body = page.split("<!-- options-table: generated from preflight/options/table.py -->\n")[1]
    assert body.split("<!-- /options-table -->")[0] == markdown()


def test_docs_api_signature_names_every_keyword_of_the_table() -> None:
    page = (DOCS / "api.md").read_text()
    block = page.split("preflight.check(mesh=None, *, ")[1].split(") -> JobReport")[0]
    written = dict(re.findall(r"(\w+)=([^,\s]+)", block))
    written.pop("on_failure")
    assert set(written) == {o.name for o in API_OPTIONS}
    for name, default in written.items():
        assert default.replace('"', "'") == repr(BY_NAME[name].default), name
