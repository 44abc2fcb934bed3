"""The history's trends, shared by the terminal view (commands/history.py) and --html (history_html.py)."""

from __future__ import annotations

from preflight.lib.units import human_bytes
from preflight.model.history_records import RunView

SPARK = "▁▂▃▄▅▆▇█"


def figure_label(kind: str, dim: str, op: str, size_bytes: int) -> str:
    """`tp all_reduce 256MiB`: the column/series name of one comparable figure."""
    what = f"{dim} {op}" if kind == "collective" else f"{kind} {dim} {op}".strip()
    return f"{what} {human_bytes(size_bytes)}".strip()


def series(runs: list[RunView]) -> dict[str, dict[str, list[tuple[str, float]]]]:
    """subject -> figure label -> [(run started, value)], oldest first: the trends."""
    out: dict[str, dict[str, list[tuple[str, float]]]] = {}
    for run in reversed(runs):
        best: dict[tuple[str, str], float] = {}
        for f in run.figures:
            key = (f.subject, figure_label(f.kind, f.dim, f.op, f.size_bytes))
            best[key] = max(best.get(key, 0.0), f.value)  # a host in several groups: its best, as judge does
        for (subject, label), value in best.items():
            out.setdefault(subject, {}).setdefault(label, []).append((run.started_at, value))
    return out


def spark(values: list[float]) -> str:
    """A sparkline of the values, oldest left."""
    if not values:
        return ""
    low, high = min(values), max(values)
    span = (high - low) or 1.0
    return "".join(SPARK[min(len(SPARK) - 1, int((v - low) / span * (len(SPARK) - 1) + 0.5))] for v in values)
