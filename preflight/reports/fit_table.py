"""Terminal tables that fit the console without splitting a figure (rich).

rich shrinks every column evenly once a table is wider than the terminal, so at 80 columns a
number broke mid-digit (`0.02` over `04`) and an op name mid-word (`all_` / `redu` / `ce`). Here
the columns that hold figures (numbers, sizes, op names, ids: `whole`) keep their whole width;
text columns shrink, wrapping between words, never below their longest word. When even that is
wider than the console, the table is split into several that each repeat the `keys` columns
(dim, op, size), so every figure is shown whole next to what it belongs to.
"""

from __future__ import annotations

from collections.abc import Sequence

from msgspec import Struct
from rich import box
from rich.cells import cell_len
from rich.console import RenderableType
from rich.table import Table
from rich.text import Text

GAP = 1  # one space between columns (SIMPLE_HEAD's separator, no padding)

Cell = str | Text


def _plain(cell: Cell) -> str:
    return cell.plain if isinstance(cell, Text) else cell


def _longest_word(text: str) -> int:
    return max((cell_len(word) for word in text.split()), default=0)


class _Column(Struct):
    header: str
    whole: bool  # a figure: never wrapped
    natural: int  # the widest cell or header on one line
    least: int  # the narrowest it may be: a figure's widest cell, a text's longest word


def _columns(headers: Sequence[str], rows: Sequence[Sequence[Cell]], whole: set[str]) -> list[_Column]:
    out = []
    for index, header in enumerate(headers):
        cells = [_plain(row[index]) for row in rows]
        lines = [line for cell in cells for line in cell.splitlines()] or [""]
        natural = max(cell_len(header), *(cell_len(line) for line in lines))
        header_word = _longest_word(header)
        if header in whole:
            least = max(header_word, *(cell_len(line) for line in lines))
        else:
            least = max(header_word, *(_longest_word(line) for line in lines))
        out.append(_Column(header, header in whole, natural, least))
    return out


def _chunks(columns: list[_Column], keys: set[str], width: int) -> list[list[int]]:
    """Column indexes per table: the keys in each, the others packed in order while they fit."""
    key_ix = [i for i, c in enumerate(columns) if c.header in keys]
    rest = [i for i, c in enumerate(columns) if c.header not in keys]
    chunks: list[list[int]] = []
    current: list[int] = []
    for index in rest:
        trial = sorted(key_ix + current + [index])
        if current and sum(columns[i].least for i in trial) + GAP * (len(trial) - 1) > width:
            chunks.append(sorted(key_ix + current))
            current = []
        current.append(index)
    chunks.append(sorted(key_ix + current))
    return chunks


def _widths(columns: list[_Column], chunk: list[int], width: int) -> dict[int, int]:
    """Each column at its least; the room left goes to the text columns, narrowest first, up to natural."""
    widths = {i: columns[i].least for i in chunk}
    room = width - sum(widths.values()) - GAP * (len(chunk) - 1)
    growing = sorted((i for i in chunk if not columns[i].whole), key=lambda i: columns[i].natural)
    while room > 0 and growing:
        share = max(1, room // len(growing))
        for i in list(growing):
            step = min(share, columns[i].natural - widths[i], room)
            widths[i] += step
            room -= step
            if widths[i] >= columns[i].natural:
                growing.remove(i)
            if room <= 0:
                break
    if room < 0:  # one column wider than the console on its own (a 200-character id): it folds
        widest = max(chunk, key=lambda i: widths[i])
        widths[widest] = max(1, widths[widest] + room)
    return widths


def fitted_tables(title: str, headers: Sequence[str], rows: Sequence[Sequence[Cell]], width: int,
                  whole: Sequence[str] = (), keys: Sequence[str] = ()) -> list[RenderableType]:
    """What to print for `rows` in `width` columns, each table under its title line: one table
    when it fits, else split as above."""
    columns = _columns(headers, rows, set(whole))
    if sum(c.natural for c in columns) + GAP * (len(columns) - 1) <= width:
        chunks = [list(range(len(columns)))]
        sized = [{i: c.natural for i, c in enumerate(columns)}]
    else:
        chunks = _chunks(columns, set(keys), width)
        sized = [_widths(columns, chunk, width) for chunk in chunks]
    tables: list[RenderableType] = []
    for number, (chunk, widths) in enumerate(zip(chunks, sized)):
        part = f" ({number + 1} of {len(chunks)})" if len(chunks) > 1 else ""
        if title:
            tables.append(Text(f"{title}{part}", style="bold"))
        table = Table(box=box.SIMPLE_HEAD, show_edge=False, pad_edge=False, padding=(0, 0))
        for i in chunk:
            table.add_column(columns[i].header, width=widths[i], overflow="fold", no_wrap=False)
        for row in rows:
            table.add_row(*(row[i] if isinstance(row[i], Text) else Text(row[i]) for i in chunk))
        tables.append(table)
    return tables
