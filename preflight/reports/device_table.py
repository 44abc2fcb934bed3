"""The device table the text and terminal reports show, and the HTML's host x device grids.

One row per device: host, index, UUID, every figure with its % of the siblings' median and
of its SKU's peak (or --expect's figure; "none" where nothing is known), correctness and the
PCIe link. The HTML shows one grid per figure: hosts down, devices across, each cell
coloured by its % of the siblings' median, the slowest cell named under the grid.
"""

from __future__ import annotations

from msgspec import Struct

from preflight.lib.units import percent
from preflight.model import JobReport
from preflight.model.device_probe import LINK_FIGURES, SLOW_RATIO, UNITS, DeviceFigure, DeviceRow

TITLE = "device probes: each figure, % of its siblings' median (same model), % of its peak"
HEADERS = ["rank", "host", "device", "uuid", "figure", "value", "of siblings", "of peak", "result", "link"]
WHOLE = ["rank", "figure", "value", "of siblings", "result"]  # figures: never wrapped on a terminal
KEYS = ["rank", "figure"]  # repeated when a narrow terminal splits the table


def _pct(value: float | None) -> str:
    return f"{percent(value)}" if value is not None else "none"


def _device(row: DeviceRow) -> str:
    if row.kind == "cuda":
        return f"GPU {row.index if row.index is not None else '?'} {row.name}".strip()
    return f"CPU {row.name}".strip()


def _link(row: DeviceRow) -> str:
    link = row.link
    if link is None or link.gen is None:
        return ""
    text = f"Gen{link.gen} x{link.width}"
    if link.max_gen and (link.max_gen, link.max_width) != (link.gen, link.width):
        text += f" (max Gen{link.max_gen} x{link.max_width})"
    return text


def _peak(figure: DeviceFigure) -> str:
    if figure.pct_of_peak is None:
        return "none"
    return f"{percent(figure.pct_of_peak)} of {figure.peak:.4g} ({figure.peak_source})"


MAX_DEVICES = 32  # the text and terminal show the devices furthest below their siblings; the JSON has all


def _worst(row: DeviceRow) -> float:
    shares = [f.pct_of_siblings for f in row.figures if f.pct_of_siblings is not None]
    return min(shares, default=1.0) - (1.0 if row.errors or row.sdc in ("differs", "unrepeatable") else 0.0)


def shown_devices(report: JobReport, limit: int = MAX_DEVICES) -> list[DeviceRow]:
    """Every device when they are few; else the `limit` furthest below their siblings (or failing), by rank."""
    rows = report.device_probes
    if len(rows) <= limit:
        return list(rows)
    return sorted(sorted(rows, key=_worst)[:limit], key=lambda r: r.rank)


def hidden_line(report: JobReport) -> str:
    """The line under the table when devices were left out of it ("" when none were)."""
    hidden = len(report.device_probes) - len(shown_devices(report))
    return f"... and {hidden} more device(s) near their siblings' median; see the HTML or JSON report" if hidden else ""


def device_rows(report: JobReport, limit: int = MAX_DEVICES) -> list[list[str]]:
    """Rows for HEADERS, a row per device and figure; empty when the device probes did not run."""
    out = []
    for row in shown_devices(report, limit):
        first = True
        for figure in row.figures:
            ident = [str(row.rank), row.host, _device(row), row.uuid] if first else ["", "", "", ""]
            tail = [row.sdc or "", _link(row)] if first else ["", ""]
            out.append([*ident, figure.name, f"{figure.value:.4g} {figure.unit}", _pct(figure.pct_of_siblings),
                        _peak(figure), *tail])
            first = False
        for name, why in sorted(row.errors.items()):
            ident = [str(row.rank), row.host, _device(row), row.uuid] if first else ["", "", "", ""]
            out.append([*ident, name, "could not run", "", why[:60], "", ""])
            first = False
        for name, why in sorted(row.skipped.items()):
            if name in LINK_FIGURES and row.kind == "cpu":
                continue  # a CPU has no host link: nothing to say on every CPU row
            ident = [str(row.rank), row.host, _device(row), row.uuid] if first else ["", "", "", ""]
            out.append([*ident, name, "skipped", "", why[:60], "", ""])
            first = False
    return out


class Grid(Struct):
    """One figure over the job: hosts down, device indexes across, % of siblings' median per cell."""

    figure: str
    unit: str
    hosts: list[str]
    columns: list[str]  # device index (GPU) or rank (CPU), as text
    cells: dict[tuple[str, str], tuple[float, float | None, int]]  # (host, column) -> (value, % of siblings, rank)
    slowest: str  # "rank 3 on node2 GPU 3: 41% of its siblings' median" ("" when none)
    slow_ratio: float = 0.5  # below it a cell is red: the device findings' own threshold (model.SLOW_RATIO)

    def colour(self, pct: float | None) -> str:
        """This grid's cell colour for a % of the siblings' median (cell_colour at its threshold)."""
        return cell_colour(pct, self.slow_ratio)

    def legend(self) -> list[tuple[str, str]]:
        """(colour, meaning) for the legend under the grid."""
        return [(cell_colour(1.0, self.slow_ratio), f"{percent(AMBER_BELOW)} of the siblings' median or more"),
                (cell_colour(AMBER_BELOW - 0.01, self.slow_ratio),
                 f"{percent(self.slow_ratio)} to {percent(AMBER_BELOW)}: slower, not a finding"),
                (cell_colour(0.0, self.slow_ratio), f"below {percent(self.slow_ratio)}: slow (a device finding)"),
                (cell_colour(None, self.slow_ratio), "no siblings to compare with")]


def grids(report: JobReport) -> list[Grid]:
    """One grid per figure measured, in UNITS' order."""
    out = []
    for name in UNITS:
        cells: dict[tuple[str, str], tuple[float, float | None, int]] = {}
        worst: tuple[float, str] | None = None
        for row in report.device_probes:
            figure = row.figure(name)
            if figure is None:
                continue
            column = str(row.index) if row.kind == "cuda" and row.index is not None else f"rank {row.rank}"
            cells[(row.host, column)] = (figure.value, figure.pct_of_siblings, row.rank)
            if figure.pct_of_siblings is not None and (worst is None or figure.pct_of_siblings < worst[0]):
                worst = (figure.pct_of_siblings, f"rank {row.rank} on {row.host} {_device(row)}: "
                                                 f"{figure.value:.4g} {figure.unit}, {percent(figure.pct_of_siblings)} "
                                                 "of its siblings' median")
        if not cells:
            continue
        hosts = sorted({h for h, _ in cells})
        columns = sorted({c for _, c in cells}, key=lambda c: (not c.isdigit(), int(c) if c.isdigit() else c))
        kinds = {row.kind for row in report.device_probes if row.figure(name) is not None}
        ratio = min(SLOW_RATIO.get(kind, 0.5) for kind in kinds)
        out.append(Grid(name, UNITS[name], hosts, columns, cells, worst[1] if worst else "", ratio))
    return out


AMBER_BELOW = 0.95  # below 95% of its siblings a cell is amber: slower, not yet a finding


def cell_colour(pct: float | None, slow_ratio: float) -> str:
    """A cell's background by its % of the siblings' median: red below `slow_ratio` (where the
    device findings start: 85% on a GPU, 50% on CPU), amber below 95%, green from 95%."""
    if pct is None:
        return "#e0e0e0"
    if pct >= AMBER_BELOW:
        return "#b7e1b0"
    if pct >= slow_ratio:
        return "#ffe08a"
    return "#f4a3a3"
