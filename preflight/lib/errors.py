"""The one exception that means "the user's input is wrong": one line, exit code 2."""

from __future__ import annotations


class BadInput(ValueError):
    """Bad env, CLI value, mesh string or peer payload. Its message is shown as is, no traceback."""


def one_line(error: BaseException | str, limit: int = 300) -> str:
    """An exception's (or a text's) message on one line, cut at `limit` characters."""
    return " ".join(str(error).split())[:limit]
