"""Tests of sync_rows: a DataTable reaches the wanted keyed rows in order, cursor kept."""

from __future__ import annotations

from typing import Any

import pytest
from textual.app import App, ComposeResult
from textual.widgets import DataTable

from raydbg.tui.table_sync import Row, sync_rows

COLUMNS = ("name", "value")


class TableApp(App[None]):
    def compose(self) -> ComposeResult:
        table: DataTable[Any] = DataTable(cursor_type="row")
        for column in COLUMNS:
            table.add_column(column, key=column)
        yield table


def table_state(table: DataTable[Any]) -> list[tuple[str, tuple[str, ...]]]:
    return [
        (str(row.key.value), tuple(str(c) for c in table.get_row(row.key)))
        for row in table.ordered_rows
    ]


async def test_add_remove_update_reorder_and_keep_cursor() -> None:
    app = TableApp()
    async with app.run_test() as pilot:
        table = app.query_one(DataTable)
        shown: dict[str, Row] = {}
        first = [("a", ("alpha", "1")), ("b", ("beta", "2")), ("c", ("gamma", "3"))]
        shown = sync_rows(table, first, COLUMNS, shown)
        assert table_state(table) == first
        table.move_cursor(row=1)  # on "b"
        await pilot.pause()

        # "d" is new and goes first, "a" goes, "c" changes its value, "b" stays.
        second = [("d", ("delta", "4")), ("c", ("gamma", "30")), ("b", ("beta", "2"))]
        shown = sync_rows(table, second, COLUMNS, shown)
        await pilot.pause()
        assert table_state(table) == second
        assert table.cursor_row == 2  # still on "b"
        assert list(shown) == ["d", "c", "b"]

        # Same data again: nothing to do, order kept.
        before = table._update_count
        shown = sync_rows(table, second, COLUMNS, shown)
        assert table._update_count == before
        assert sync_rows(table, [], COLUMNS, shown) == {}
        assert table.row_count == 0


async def test_duplicate_keys_are_refused() -> None:
    app = TableApp()
    async with app.run_test():
        table = app.query_one(DataTable)
        with pytest.raises(ValueError, match="duplicate"):
            sync_rows(table, [("a", ("x", "1")), ("a", ("y", "2"))], COLUMNS, {})
