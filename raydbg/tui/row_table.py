"""RowTable: a keyed, one-line-per-row table that repaints only the rows it must.

Textual's DataTable drops every cached cell on any change (its caches are keyed by
an update counter) and re-renders each visible cell through Rich's Padding: with
500 sessions, 64 nodes and 1,000 events changing every second a refresh cost
60-150 ms of CPU. Here a row is rendered once into a Strip, cached by key and
stripe, and reused while its cells stay the same; rows that only move are cropped
from the cache, so a refresh costs the rows that changed and are on screen.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import ClassVar

from rich.cells import cell_len
from rich.segment import Segment
from rich.style import Style
from rich.text import Text
from textual import events
from textual.binding import Binding, BindingType
from textual.geometry import Region, Size
from textual.message import Message
from textual.scroll_view import ScrollView
from textual.strip import Strip
from textual.widget import Widget

Cell = str | Text
Row = tuple[Cell, ...]

PAD = 1  # blank cells either side of a column, as DataTable draws them


class RowTable(ScrollView, can_focus=True):
    """Rows of plain text or Rich ``Text`` cells under a header, a row cursor, Enter selects."""

    ALLOW_SELECT = False

    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("enter", "select", "Select", show=False),
        Binding("up", "cursor_up", "Cursor up", show=False),
        Binding("down", "cursor_down", "Cursor down", show=False),
        Binding("pageup", "page_up", "Page up", show=False),
        Binding("pagedown", "page_down", "Page down", show=False),
        Binding("home,ctrl+home", "first", "First row", show=False),
        Binding("end,ctrl+end", "last", "Last row", show=False),
        Binding("left", "scroll_left", "Scroll left", show=False),
        Binding("right", "scroll_right", "Scroll right", show=False),
    ]

    COMPONENT_CLASSES: ClassVar[set[str]] = {
        "row-table--header",
        "row-table--cursor",
        "row-table--even-row",
        "row-table--odd-row",
    }

    # DataTable's look, so the panes read the same as before.
    DEFAULT_CSS = """
    RowTable {
        background: $surface;
        color: $foreground;
        height: auto;
        max-height: 100%;
        &:focus {
            background-tint: $foreground 5%;
            & > .row-table--cursor {
                background: $block-cursor-background;
                color: $block-cursor-foreground;
                text-style: $block-cursor-text-style;
            }
            & > .row-table--header { background-tint: $foreground 5%; }
        }
        &:dark > .row-table--even-row { background: $surface-darken-1 40%; }
        & > .row-table--header { text-style: bold; background: $panel; color: $foreground; }
        &:ansi > .row-table--header { background: ansi_bright_blue; color: ansi_default; }
        & > .row-table--even-row { background: $surface-lighten-1 50%; }
        & > .row-table--cursor {
            background: $block-cursor-blurred-background;
            color: $block-cursor-blurred-foreground;
            text-style: $block-cursor-blurred-text-style;
        }
    }
    """

    class Selected(Message):
        """Enter (or a click on the cursor row) on the row with ``key``."""

        def __init__(self, table: RowTable, key: str) -> None:
            super().__init__()
            self.table = table
            self.key = key

        @property
        def control(self) -> RowTable:
            return self.table

    def __init__(
        self,
        columns: Sequence[str],
        *,
        zebra_stripes: bool = True,
        name: str | None = None,
        id: str | None = None,
        classes: str | None = None,
    ) -> None:
        super().__init__(name=name, id=id, classes=classes)
        self.columns = tuple(columns)
        self.zebra_stripes = zebra_stripes
        self._keys: list[str] = []
        self._rows: dict[str, Row] = {}
        self._cell_widths: dict[str, tuple[int, ...]] = {}
        self._widths = tuple(cell_len(c) for c in self.columns)
        self._strips: dict[tuple[str, str], Strip] = {}  # (key, variant) -> whole row
        self._styles: tuple[Style, ...] = ()
        self._cursor = 0
        self._size_rows()

    # -- data -----------------------------------------------------------------

    @property
    def row_count(self) -> int:
        return len(self._keys)

    @property
    def row_keys(self) -> list[str]:
        return list(self._keys)

    @property
    def cursor_row(self) -> int:
        return self._cursor

    @property
    def cursor_key(self) -> str | None:
        return self._keys[self._cursor] if 0 <= self._cursor < len(self._keys) else None

    def get_row_at(self, index: int) -> Row:
        return self._rows[self._keys[index]]

    def set_rows(self, wanted: Sequence[tuple[str, Row]]) -> None:
        """Show ``wanted`` (key, cells) in that order; the cursor stays on its row's key."""
        keys = [key for key, _ in wanted]
        rows = dict(wanted)
        if len(rows) != len(keys):
            raise ValueError("duplicate row keys")
        for key, row in wanted:
            if len(row) != len(self.columns):
                raise ValueError(f"row {key!r} has {len(row)} cells for {len(self.columns)}")
        moved = keys != self._keys
        edited: list[str] = []
        for key, row in wanted:
            old = self._rows.get(key)
            if old is row or old == row:
                continue
            edited.append(key)
            self._forget(key)
            self._cell_widths[key] = tuple(_width(cell) for cell in row)
        for key in self._rows.keys() - rows.keys():
            self._forget(key)
            del self._cell_widths[key]
        if not moved and not edited:
            return  # nothing to repaint: the common case between polls
        cursor_key = self.cursor_key
        self._keys, self._rows = keys, rows
        header = tuple(cell_len(c) for c in self.columns)
        widths = tuple(
            max(column) for column in zip(header, *self._cell_widths.values(), strict=True)
        )
        if widths != self._widths:
            self._widths = widths
            self._strips.clear()
            moved = True  # every line changes
        if cursor_key in rows:
            self._cursor = keys.index(cursor_key)
        else:  # its row went away: stay at the same place
            self._cursor = max(0, min(self._cursor, len(keys) - 1))
        self._size_rows()
        if moved:
            self.refresh()
        else:  # same rows in the same places: repaint just the edited lines
            index = {key: i for i, key in enumerate(keys)}
            for key in edited:
                self.refresh_line(index[key] + 1)

    def _forget(self, key: str) -> None:
        for variant in ("even", "odd", "cursor"):
            self._strips.pop((key, variant), None)

    def _size_rows(self) -> None:
        width = sum(self._widths) + 2 * PAD * len(self._widths)
        size = Size(width, len(self._keys) + 1)  # +1: the header line
        if size == self.virtual_size:
            return
        height = self.styles.height
        if self.is_mounted and height is not None and not height.is_auto:
            # Our own size does not depend on the rows: update the scrollbars only.
            # Setting virtual_size re-lays out and repaints the whole screen (~15 ms).
            self.set_reactive(RowTable.virtual_size, size)
            self._scroll_update(size)
        else:
            self.virtual_size = size

    # -- cursor ---------------------------------------------------------------

    def move_cursor(self, row: int, scroll: bool = True) -> None:
        if not self._keys:
            return
        row = max(0, min(row, len(self._keys) - 1))
        old, self._cursor = self._cursor, row
        if old != row:
            self.refresh_line(old + 1)
            self.refresh_line(row + 1)
        if scroll:
            self._scroll_to_cursor()

    def _scroll_to_cursor(self) -> None:
        visible = max(1, self.scrollable_content_region.height - 1)
        top = round(self.scroll_offset.y)
        if self._cursor < top:
            self.scroll_to(y=self._cursor, animate=False)
        elif self._cursor >= top + visible:
            self.scroll_to(y=self._cursor - visible + 1, animate=False)

    def _page(self) -> int:
        return max(1, self.scrollable_content_region.height - 2)

    def action_cursor_up(self) -> None:
        self.move_cursor(self._cursor - 1)

    def action_cursor_down(self) -> None:
        self.move_cursor(self._cursor + 1)

    def action_page_up(self) -> None:
        self.move_cursor(self._cursor - self._page())

    def action_page_down(self) -> None:
        self.move_cursor(self._cursor + self._page())

    def action_first(self) -> None:
        self.move_cursor(0)

    def action_last(self) -> None:
        self.move_cursor(len(self._keys) - 1)

    def action_select(self) -> None:
        key = self.cursor_key
        if key is not None:
            self.post_message(self.Selected(self, key))

    def on_click(self, event: events.Click) -> None:
        offset = event.get_content_offset(self)
        if offset is None or offset.y == 0:
            return
        row = offset.y - 1 + round(self.scroll_offset.y)
        if row >= len(self._keys):
            return
        if row == self._cursor:
            self.action_select()
        else:
            self.move_cursor(row)

    # -- drawing --------------------------------------------------------------

    def render_lines(self, crop: Region) -> list[Strip]:
        self._current_styles()  # once per paint, not per line
        return super().render_lines(crop)

    def render_line(self, y: int) -> Strip:
        if not self._styles:
            self._current_styles()
        header, cursor, even, odd = self._styles
        width = self.size.width
        scroll_x, scroll_y = (round(v) for v in self.scroll_offset)
        if y == 0:
            strip = self._strips.get(("", "header"))
            if strip is None:
                strip = self._strips[("", "header")] = self._render_row(self.columns, header)
            return strip.crop_extend(scroll_x, scroll_x + width, header)
        index = y - 1 + scroll_y
        if index >= len(self._keys):
            return Strip.blank(width, self.rich_style)
        if index == self._cursor:
            variant, style = "cursor", cursor
        elif self.zebra_stripes and index % 2 == 0:
            variant, style = "even", even
        else:
            variant, style = "odd", odd
        key = self._keys[index]
        strip = self._strips.get((key, variant))
        if strip is None:
            strip = self._render_row(self._rows[key], style, over=variant == "cursor")
            self._strips[(key, variant)] = strip
        return strip.crop_extend(scroll_x, scroll_x + width, style)

    def _current_styles(self) -> None:
        """The four row styles; focus or theme changes them, and then every strip."""
        get = self.get_component_rich_style
        styles = (
            get("row-table--header"),
            get("row-table--cursor"),
            get("row-table--even-row"),
            get("row-table--odd-row"),
        )
        if styles != self._styles:
            self._styles = styles
            self._strips.clear()

    def _render_row(self, row: Sequence[Cell], style: Style, over: bool = False) -> Strip:
        """One row at the table's column widths; ``over``: the style's colours win (cursor)."""
        line = Text(no_wrap=True, end="")
        gap = " " * PAD
        for cell, width in zip(row, self._widths, strict=True):
            text = cell.copy() if isinstance(cell, Text) else Text(cell.replace("\n", " "))
            text.truncate(width, overflow="ellipsis", pad=True)
            line.append(gap)
            line.append_text(text)
            line.append(gap)
        # A span, not Text(style=...): Text.render drops the base style of span-less text.
        line.stylize_before(style)
        segments = list(line.render(self.app.console))
        if over:
            colours = Style.from_color(style.color, style.bgcolor)
            segments = list(Segment.apply_style(segments, post_style=colours))
        return Strip(segments, line.cell_len).simplify()


def _width(cell: Cell) -> int:
    return cell.cell_len if isinstance(cell, Text) else cell_len(cell)


def set_border_title(widget: Widget, title: str) -> None:
    """Set a border title only when it changes: setting one repaints the whole widget."""
    if widget.border_title != title:
        widget.border_title = title
