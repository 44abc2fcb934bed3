"""The one exception that means "the user's input is wrong": one line, exit code 2."""

from __future__ import annotations


class BadInput(ValueError):
    """Bad env, CLI value, mesh string or peer payload. Its message is shown as is, no traceback."""
