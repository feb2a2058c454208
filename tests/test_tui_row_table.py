"""Tests of RowTable: keyed rows in order, cursor kept on its row, only changed rows drawn."""

from __future__ import annotations

from typing import Any

import pytest
from rich.text import Text
from textual.app import App, ComposeResult

from raydbg.tui.row_table import Row, RowTable

COLUMNS = ("name", "value")


class TableApp(App[None]):
    def __init__(self) -> None:
        super().__init__()
        self.selected: list[str] = []

    def compose(self) -> ComposeResult:
        yield RowTable(COLUMNS)

    def on_row_table_selected(self, event: RowTable.Selected) -> None:
        self.selected.append(event.key)


def rows(*keys: str) -> list[tuple[str, Row]]:
    return [(key, (f"row {key}", key.upper())) for key in keys]


def line(table: RowTable, y: int) -> str:
    return table.render_line(y).text.rstrip()


async def test_order_cursor_and_select() -> None:
    app = TableApp()
    async with app.run_test(size=(40, 10)) as pilot:
        table = app.query_one(RowTable)
        table.focus()
        table.set_rows(rows("a", "b", "c"))
        await pilot.press("down")  # on "b"
        assert table.cursor_key == "b"
        table.set_rows(rows("new", "a", "b", "c"))  # a row above: the cursor follows "b"
        assert table.row_keys == ["new", "a", "b", "c"] and table.cursor_row == 2
        table.set_rows(rows("new", "a", "c"))  # "b" gone: the cursor stays in place
        assert table.cursor_key == "c"
        await pilot.press("enter")
        assert app.selected == ["c"]
        await pilot.pause()
        assert line(table, 0).split() == ["name", "value"]
        assert line(table, 1).split() == ["row", "new", "NEW"]
        await pilot.click(RowTable, offset=(2, 1))  # first click moves, second selects
        assert table.cursor_key == "new" and app.selected == ["c"]
        await pilot.click(RowTable, offset=(2, 1))
        assert app.selected == ["c", "new"]
        table.set_rows([])
        assert table.row_count == 0 and table.cursor_key is None


async def test_cells_are_text_not_markup_and_columns_fit() -> None:
    app = TableApp()
    async with app.run_test(size=(60, 10)) as pilot:
        table = app.query_one(RowTable)
        table.set_rows([("k", ("KeyError['x'] [bold]", Text("bar", style="green")))])
        await pilot.pause()
        assert line(table, 1).split() == ["KeyError['x']", "[bold]", "bar"]
        assert table.get_row_at(0)[0] == "KeyError['x'] [bold]"


async def test_only_new_and_changed_rows_are_drawn(monkeypatch: pytest.MonkeyPatch) -> None:
    app = TableApp()
    async with app.run_test(size=(40, 12)) as pilot:
        table = app.query_one(RowTable)
        keys = [f"k{i:02d}" for i in range(40)]
        table.set_rows(rows(*keys))
        await pilot.pause()
        for new in ("n1", "n2"):  # each stripe of each row drawn once
            keys.insert(0, new)
            table.set_rows(rows(*keys))
            await pilot.pause()
        drawn: list[Any] = []
        render = table._render_row
        monkeypatch.setattr(
            table, "_render_row", lambda *a, **k: drawn.append(a) or render(*a, **k)
        )
        keys.insert(0, "n3")  # new top row: everything moves down one line
        table.set_rows(rows(*keys))
        await pilot.pause()
        # The new row, and the row above that is on an odd line for the first time.
        assert [row[0] for row, *_ in drawn] == ["row n3", "row n2"]
        drawn.clear()
        table.set_rows(rows(*keys))  # nothing changed: nothing drawn
        await pilot.pause()
        assert drawn == []
        changed = [(k, ("edited", "x")) if k == "k05" else (k, r) for k, r in rows(*keys)]
        table.set_rows(changed)
        await pilot.pause()
        assert [row[0] for row, *_ in drawn] == ["edited"]


async def test_bad_rows_are_refused() -> None:
    app = TableApp()
    async with app.run_test():
        table = app.query_one(RowTable)
        with pytest.raises(ValueError, match="duplicate"):
            table.set_rows([("a", ("x", "1")), ("a", ("y", "2"))])
        with pytest.raises(ValueError, match="cells"):
            table.set_rows([("a", ("x",))])


async def test_scrollbars_follow_the_row_count() -> None:
    app = TableApp()
    async with app.run_test(size=(40, 12)) as pilot:
        table = app.query_one(RowTable)
        table.styles.height = 8  # a fixed height: rows change no layout, only scrollbars
        table.set_rows(rows("a", "b"))
        await pilot.pause()
        assert not table.show_vertical_scrollbar
        table.set_rows(rows(*(f"k{i:02d}" for i in range(40))))
        await pilot.pause()
        assert table.show_vertical_scrollbar
        assert table.vertical_scrollbar.window_virtual_size == 41  # rows and header
        await pilot.press("end")
        assert table.scroll_offset.y > 0 and table.cursor_key == "k39"
        assert line(table, 7).split() == ["row", "k39", "K39"]  # the cursor row is shown
        table.set_rows(rows("a", "b"))
        await pilot.pause()
        assert not table.show_vertical_scrollbar and table.scroll_offset.y == 0
        assert line(table, 1).split() == ["row", "a", "A"]


async def test_cursor_shows_focus() -> None:
    app = TableApp()
    async with app.run_test(size=(40, 8)) as pilot:
        table = app.query_one(RowTable)
        table.set_rows(rows("a", "b"))
        table.focus()
        await pilot.pause()
        focused = list(table.render_line(1))[0].style  # the cursor row's first cell
        table.blur()
        await pilot.pause()
        blurred = list(table.render_line(1))[0].style
        assert focused != blurred  # a focused table's cursor stands out
        assert list(table.render_line(2))[0].style not in (focused, blurred)  # a plain row
