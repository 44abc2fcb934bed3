"""`preflight history`'s options as typed values, parsed once where they enter and validated there.

The counterpart of RunOptions (preflight/options/run.py) for the `history` subcommand:
`HistoryOptions.parse` turns the flags as written (--since 7d, --last 50, --flaky 3/10,
--older-than 90d, --timeout 30) into typed values, and `__post_init__` validates every field,
and what ties them together (prune needs --older-than, exclude needs --flaky), with the same
limits RunOptions applies to the same things (the history timeout, K <= N of --flaky). The
command (preflight/commands/history.py) reads only the typed values; nothing after this module
parses a flag's text or checks its bounds again.
"""

from __future__ import annotations

import datetime
import re
import time

from msgspec import Struct

from preflight.lib.errors import BadInput, BadOptionType
from preflight.lib.numbers import ascii_decimal, ascii_int, shown
from preflight.model.history_records import HistoryFilters
from preflight.options import MAX_SECONDS, bounded_seconds, check_flaky, check_history_url, history_url, parse_flaky

ACTIONS = ("show", "exclude", "prune")
MAX_LAST = 100_000
DEFAULT_FLAKY = "3/10"
_DURATION = re.compile(r"([0-9]{1,6})\s{0,4}([smhdw])", re.ASCII)
_SECONDS = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 7 * 86400}


class HistoryOptions(Struct):
    """Everything `preflight history` was asked to do, as typed values (validated in __post_init__)."""

    url: str  # --history, else $PREFLIGHT_HISTORY
    action: str = "show"
    host: str = ""
    gpu: str = ""
    check: str = ""
    since: float | None = None  # seconds since the epoch; None: no limit
    last: int = 50
    json_path: str | None = None  # "-": stdout
    html_path: str | None = None
    flaky: tuple[int, int] | None = None  # exclude: (K, N), failed in K of the last N runs
    exclude_file: str | None = None
    older_than_s: float | None = None  # prune: runs older than this many seconds
    timeout_s: float = 30.0  # every wait on the history
    wide: bool = False  # show: tables at full width on a terminal too (piped output always is)
    drain: bool = False  # exclude: print (with `yes`, run) scontrol DRAIN for the flaky hosts (commands/drain.py)
    yes: bool = False
    drain_warnings: bool = False  # accepted as `preflight report`'s; the flaky hosts are HIS003 warnings already

    def __post_init__(self) -> None:
        if self.action not in ACTIONS:
            raise BadInput(f"history {shown(str(self.action))}: one of {', '.join(ACTIONS)}")
        if not isinstance(self.url, str):
            raise BadOptionType(f"--history must be a URL string, not {type(self.url).__name__}")
        if not self.url:
            raise BadInput("no history: pass --history URL or set PREFLIGHT_HISTORY (`preflight explain history`)")
        check_history_url(self.url)
        self.timeout_s = bounded_seconds("timeout_s", self.timeout_s)
        if not 1 <= self.last <= MAX_LAST:
            raise BadInput(f"--last {self.last}: from 1 to {MAX_LAST}")
        if self.flaky is not None:
            check_flaky(*self.flaky)
        if self.older_than_s is not None and not self.older_than_s >= 0:
            raise BadInput(f"--older-than: {self.older_than_s!r} s is not an age")
        if self.action == "prune" and self.older_than_s is None:
            raise BadInput("history prune needs --older-than AGE (e.g. 90d)")
        for flag in ("yes", "drain_warnings"):
            if getattr(self, flag) and not self.drain:
                raise BadInput(f"--{flag.replace('_', '-')} needs --drain")
        if self.drain and self.action != "exclude":
            raise BadInput("--drain goes with `history exclude --flaky` (or `preflight report r.json --drain`)")
        if self.action == "exclude" and self.flaky is None:
            raise BadInput("history exclude needs --flaky [K/N] (the hosts that failed in K of their last N runs)")

    @classmethod
    def parse(cls, *, history: str | None = None, since: str = "", last: str = "50", flaky: str | None = None,
              older_than: str = "", timeout: str = "30", **typed: str | bool | None) -> HistoryOptions:
        """HistoryOptions from the flags as written (argparse's strings), plus those already typed."""
        return cls(url=history_url(history), since=parse_since(since) if since else None,
                   last=ascii_int(last, "--last", minimum=1, maximum=MAX_LAST),
                   flaky=parse_flaky(flaky) if flaky is not None else None,
                   older_than_s=parse_age(older_than, "--older-than") if older_than else None,
                   timeout_s=ascii_decimal(timeout, "--timeout", maximum=MAX_SECONDS), **typed)  # type: ignore[arg-type]

    def filters(self) -> HistoryFilters:
        """Which runs `show` reads."""
        return HistoryFilters(host=self.host, gpu=self.gpu, check=self.check, since=self.since, last=self.last)


def parse_age(text: str, flag: str) -> float:
    """`90d` -> seconds (s, m, h, d, w)."""
    match = _DURATION.fullmatch(text.strip())
    if not match:
        raise BadInput(f"{flag}: {shown(text)} is not an age (e.g. 90d, 12h, 2w)")
    return int(match.group(1)) * _SECONDS[match.group(2)]


def parse_since(text: str) -> float:
    """An age before now (7d) or an ISO date/time (UTC when no zone): seconds since the epoch."""
    if _DURATION.fullmatch(text.strip()):
        return time.time() - parse_age(text, "--since")
    try:
        moment = datetime.datetime.fromisoformat(text.strip())
    except ValueError:
        raise BadInput(f"--since: {shown(text)} is neither an age (7d) nor a date (2026-01-31)") from None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=datetime.timezone.utc)
    return moment.timestamp()
