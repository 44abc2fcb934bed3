"""The run options on the command line, built from the options table (preflight/options/table.py).

`add_run_options` declares one flag per row, in the row's `--help` group, with the row's
reader, default, metavar and help; `options_from_args` hands the parsed namespace to
`RunOptions.build` by the rows' names, as `preflight.check` hands it its keywords.
"""

from __future__ import annotations

import argparse
import shlex
from collections.abc import Sequence
from typing import Any

from preflight.lib.errors import BadInput
from preflight.options import GROUPS, OPTIONS, Option, RunOptions
from preflight.options.kinds import FLAG
from preflight.options.table import help_values


def _reader(option: Option) -> Any:
    """The row's reader as argparse's `type`: its BadInput becomes argparse's one-line usage error."""
    read = option.kind.read
    if read is None:
        return None

    def argument(text: str) -> Any:
        try:
            return read(text)
        except (BadInput, ValueError) as exc:
            raise argparse.ArgumentTypeError(str(exc)) from None
    argument.__name__ = option.flag  # argparse names a converter in its message when it fails oddly
    return argument


def add_run_options(parser: argparse.ArgumentParser) -> None:
    """The options of a run, shared by `run` and `launch`: one flag per row of the table, by group."""
    values = help_values()
    groups = {name: parser.add_argument_group(title) for name, title in GROUPS.items()}
    for option in OPTIONS:
        declared: dict[str, Any] = {"dest": option.name, "default": option.default,
                                    "help": argparse.SUPPRESS if option.internal else option.help_text(values)}
        if option.kind is FLAG:
            declared["action"] = "store_true"
        else:
            declared["metavar"] = option.metavar
            if (reader := _reader(option)) is not None:
                declared["type"] = reader
            if option.kind.choices:
                declared["choices"] = option.kind.choices
        groups[option.group].add_argument(option.flag, **declared)


def options_from_args(args: argparse.Namespace, argv: Sequence[str]) -> RunOptions:
    """RunOptions from parsed flags: the one place this process parses --mesh, --sizes, --ops, --expect."""
    given = {option.name: getattr(args, option.name) for option in OPTIONS}
    return RunOptions.build(
        **given, command_line=shlex.join(["preflight", *_password_hidden(shown_argv(argv), args.history)]))


INTERNAL_FLAGS = tuple(option.flag for option in OPTIONS if option.internal)  # set by `launch` or tests
_VALUE_TAKEN = frozenset(option.flag for option in OPTIONS if option.internal and option.kind is not FLAG)


def shown_argv(argv: Sequence[str]) -> list[str]:
    """argv as the reports show it: without the internal flags (and their values) launch adds."""
    shown: list[str] = []
    skip_value = False
    for arg in argv:
        if skip_value:
            skip_value = False
            continue
        if arg in INTERNAL_FLAGS:
            skip_value = arg in _VALUE_TAKEN  # --stdout-held is alone; --verdict-file takes the next word
            continue
        if arg.startswith(tuple(f"{flag}=" for flag in INTERNAL_FLAGS)):
            continue
        shown.append(arg)
    return shown


def _password_hidden(argv: Sequence[str], url: str | None) -> list[str]:
    """argv with the --history URL's password replaced by *** (the command line lands in every report)."""
    if not url or "@" not in url:
        return list(argv)
    from preflight.history.store import shown_url

    return [word.replace(url, shown_url(url)) for word in argv]
