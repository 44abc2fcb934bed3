"""A report's ISO 8601 times as seconds since the epoch (the history's rows, the metrics' timestamp)."""

from __future__ import annotations

import datetime


def epoch(iso: str) -> float:
    """Seconds since the epoch from the report's ISO time ("" or garbage: now)."""
    try:
        return datetime.datetime.fromisoformat(iso).timestamp()
    except ValueError:
        return datetime.datetime.now(datetime.timezone.utc).timestamp()
