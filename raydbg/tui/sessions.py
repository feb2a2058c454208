"""Sessions pane: paused sessions, live, newest first, with a `/` filter and Enter to attach."""

from __future__ import annotations

import time
from typing import Any

from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Vertical
from textual.widgets import DataTable, Input

from raydbg import records
from raydbg.tui.format import SESSION_COLUMNS, session_matches, session_row
from raydbg.tui.messages import AttachRequested


class SessionsPane(Vertical):
    """A table of session records; diff-updates rows so 500 sessions stay cheap."""

    BINDINGS = [
        Binding("escape", "clear_filter", "Clear filter", show=False),
    ]

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.border_title = "Paused sessions"
        self.sessions: list[dict[str, Any]] = []
        self.filter_text = ""
        self._shown: list[str] = []  # session ids, in table order
        self._seen: set[str] | None = None  # None until the first list: no notices for it

    def compose(self) -> ComposeResult:
        yield Input(placeholder="filter sessions (Esc clears)", id="session-filter")
        table: DataTable[str] = DataTable(
            id="sessions-table", cursor_type="row", zebra_stripes=True
        )
        for column in SESSION_COLUMNS:  # before mount: rows may arrive first
            table.add_column(column, key=column)
        yield table

    def on_mount(self) -> None:
        self.query_one(Input).display = False

    @property
    def table(self) -> DataTable[str]:
        return self.query_one("#sessions-table", DataTable)

    def update_sessions(self, sessions: list[dict[str, Any]]) -> None:
        self._notify_new(sessions)
        self.sessions = sorted(sessions, key=lambda r: -float(r.get("since", 0)))
        self._render_rows()

    def _notify_new(self, sessions: list[dict[str, Any]]) -> None:
        ids = {str(r.get("id")) for r in sessions}
        if self._seen is not None:
            for rec in sessions:
                if str(rec.get("id")) not in self._seen:
                    where = f"{rec.get('file', '?')}:{rec.get('line', '?')}"
                    self.app.notify(f"{records.label(rec)} paused at {where}", title="New session")
        self._seen = ids

    def _render_rows(self) -> None:
        table = self.table
        now = time.time()
        wanted = [r for r in self.sessions if session_matches(r, self.filter_text)]
        ids = [str(r["id"]) for r in wanted]
        if ids != self._shown:
            # Membership or order changed: rebuild, keeping the cursor on the same session.
            current = self.selected_id()
            table.clear()
            for rec in wanted:
                table.add_row(*session_row(rec, now), key=str(rec["id"]))
            self._shown = ids
            if current in ids:
                table.move_cursor(row=ids.index(current))
            table.border_subtitle = None
        else:
            for rec in wanted:
                for column, value in zip(SESSION_COLUMNS, session_row(rec, now), strict=True):
                    if table.get_cell(str(rec["id"]), column) != value:
                        table.update_cell(str(rec["id"]), column, value)
        total = len(self.sessions)
        shown = f"{len(ids)}/{total}" if self.filter_text else str(total)
        self.border_title = f"Paused sessions ({shown})"

    def selected_id(self) -> str | None:
        table = self.table
        if not self._shown or table.cursor_row < 0 or table.cursor_row >= len(self._shown):
            return None
        return self._shown[table.cursor_row]

    def on_data_table_row_selected(self, event: DataTable.RowSelected) -> None:
        event.stop()
        if event.row_key.value is not None:
            self.post_message(AttachRequested(str(event.row_key.value)))

    def action_filter(self) -> None:
        box = self.query_one(Input)
        box.display = True
        box.focus()

    def action_clear_filter(self) -> None:
        box = self.query_one(Input)
        box.value = ""
        box.display = False
        self.table.focus()

    def on_input_changed(self, event: Input.Changed) -> None:
        event.stop()
        self.filter_text = event.value.strip()
        self._render_rows()

    def on_input_submitted(self, event: Input.Submitted) -> None:
        event.stop()
        self.table.focus()
