"""The exceptions that cross the steps: bad input (one line, exit 2) and an interrupt (exit 4)."""

from __future__ import annotations


class BadInput(ValueError):
    """Bad env, CLI value, mesh string or peer payload. Its message is shown as is, no traceback."""


def one_line(error: BaseException | str, limit: int = 300) -> str:
    """An exception's (or a text's) message on one line, cut at `limit` characters."""
    return " ".join(str(error).split())[:limit]


class Interrupted(BaseException):
    """SIGTERM / SIGINT arrived: the run finishes with what is known, verdict incomplete.

    A BaseException, like KeyboardInterrupt: the `except Exception` that turns a failed store
    connection or check into a finding must not swallow it (a SIGTERM during the store's
    creation once became "the store did not form" and a wrong verdict).
    """


class BadOptionType(BadInput, TypeError):
    """An option of the wrong type (a str where seconds go): bad input, and a TypeError to an API caller."""
