"""Lays out a listing as plain text columns: whole values in a pipe; on a narrow terminal, drop before cut (pure).

`raydbg list | grep ...` must print every value whole (as `kubectl get` does), and the
id a user copies into `raydbg attach` / `raydbg forward` is never shortened. A
terminal too narrow for every column loses the least useful columns first; only when
the kept ones (those the caller never drops) still do not fit are the widest of them
(never the id) cut with "…".
"""

from __future__ import annotations

import unicodedata
from collections.abc import Sequence

GAP = 2  # spaces between columns
MIN_CUT = 6  # a cut column keeps at least this many cells
ELLIPSIS = "…"


def cell_width(text: str) -> int:
    """Terminal cells taken by `text` (wide East Asian characters count two)."""
    return sum(2 if unicodedata.east_asian_width(ch) in "WF" else 1 for ch in text)


def _one_line(value: str) -> str:
    return " ".join(str(value).split())


def _cut(text: str, width: int) -> str:
    if cell_width(text) <= width:
        return text
    out, used = [], 0
    for ch in text:
        w = cell_width(ch)
        if used + w > width - 1:
            break
        out.append(ch)
        used += w
    return "".join(out) + ELLIPSIS


def _natural(columns: Sequence[str], rows: Sequence[Sequence[str]]) -> list[int]:
    return [max([cell_width(c)] + [cell_width(r[i]) for r in rows]) for i, c in enumerate(columns)]


def _total(widths: Sequence[int]) -> int:
    return sum(widths) + GAP * max(0, len(widths) - 1)


def plan(columns: Sequence[str], rows: Sequence[Sequence[str]], width: int | None,
         drop_order: Sequence[str] = (), never_cut: Sequence[str] = ()) -> tuple[list[int], list[int]]:
    """(indexes of the columns shown, their widths) for a terminal `width` (None: a pipe).

    Columns named in `drop_order` go first to last while the row is too wide (columns not
    named there are never dropped); then the widest cuttable columns shrink (not below
    MIN_CUT). Columns in `never_cut` keep their width.
    """
    cells = [[_one_line(v) for v in row] for row in rows]
    natural = _natural(columns, cells)
    shown = list(range(len(columns)))
    if width is None:
        return shown, natural
    for name in drop_order:
        if _total([natural[i] for i in shown]) <= width:
            break
        if name in columns and columns.index(name) in shown and len(shown) > 1:
            shown.remove(columns.index(name))
    widths = {i: natural[i] for i in shown}
    cuttable = [i for i in shown if columns[i] not in never_cut]
    while _total(list(widths.values())) > width:
        candidates = [i for i in cuttable if widths[i] > max(MIN_CUT, cell_width(columns[i]))]
        if not candidates:
            break  # the uncuttable columns alone are wider: let the terminal wrap
        widest = max(candidates, key=lambda i: widths[i])
        over = _total(list(widths.values())) - width
        widths[widest] = max(MIN_CUT, cell_width(columns[widest]), widths[widest] - over)
    return shown, [widths[i] for i in shown]


def render(columns: Sequence[str], rows: Sequence[Sequence[str]], width: int | None,
           drop_order: Sequence[str] = (), never_cut: Sequence[str] = ()) -> list[str]:
    """The header and the rows as lines of text (no trailing spaces)."""
    cells = [[_one_line(v) for v in row] for row in rows]
    shown, widths = plan(columns, cells, width, drop_order, never_cut)
    lines = []
    for row in [list(columns), *cells]:
        parts = []
        for i, w in zip(shown, widths, strict=True):
            text = _cut(row[i], w)
            parts.append(text + " " * (w - cell_width(text)))
        lines.append((" " * GAP).join(parts).rstrip())
    return lines
