"""The options of a run: one table of rows (table.py), their kinds (kinds.py), the text parsers
(values.py) and the typed, validated RunOptions both front doors build (run.py).

`from preflight.options import RunOptions` is the way in; the names below are re-exported so
that callers need not know which file of the package holds them.
"""

from preflight.options.kinds import Kind
from preflight.options.run import (
    RunOptions,
    bounded_seconds,
    check_flaky,
    check_history_url,
    history_url,
    validate_selection,
)
from preflight.options.table import AGREEING, API_OPTIONS, BY_NAME, FLAGS, GROUPS, OPTIONS, Option, option_name
from preflight.options.values import (
    BACKENDS,
    CLOCK_SKEW_S,
    DEVICE_FIGURES,
    LOCALIZE,
    MAX_COUNT,
    MAX_FLAKY_WINDOW,
    MAX_LIST_CHARS,
    MAX_RATE,
    MAX_RATIO,
    MAX_SECONDS,
    MAX_SIZE,
    MAX_TFLOPS,
    OPS,
    STORAGE_FIGURES,
    parse_count,
    parse_expect,
    parse_flaky,
    parse_flops,
    parse_ops,
    parse_rate,
    parse_seconds,
    parse_size,
    parse_sizes,
    split_clock_expect,
    split_device_expect,
    split_storage_expect,
    storage_options,
)
from preflight.reports.targets import ReportTargets

__all__ = [
    "AGREEING", "API_OPTIONS", "BACKENDS", "BY_NAME", "CLOCK_SKEW_S", "DEVICE_FIGURES", "FLAGS", "GROUPS", "LOCALIZE",
    "MAX_COUNT", "MAX_FLAKY_WINDOW", "MAX_LIST_CHARS", "MAX_RATE", "MAX_RATIO", "MAX_SECONDS", "MAX_SIZE", "MAX_TFLOPS",
    "OPS", "OPTIONS", "STORAGE_FIGURES", "Kind", "Option", "ReportTargets", "RunOptions", "bounded_seconds",
    "check_flaky", "check_history_url", "history_url", "option_name", "parse_count", "parse_expect", "parse_flaky",
    "parse_flops", "parse_ops", "parse_rate", "parse_seconds", "parse_size", "parse_sizes", "split_clock_expect",
    "split_device_expect", "split_storage_expect", "storage_options", "validate_selection",
]
