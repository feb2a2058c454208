"""Sessions pane: paused sessions, live, newest first, with a `/` filter and Enter to attach."""

from __future__ import annotations

import time
from typing import Any

from textual import work
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Vertical
from textual.widgets import Input

from raydbg import records
from raydbg.gang.ranks import held_by_session, rank_ranges
from raydbg.tui.format import SESSION_COLUMNS, age, session_matches, session_row
from raydbg.tui.messages import AttachRequested
from raydbg.tui.row_table import RowTable, set_border_title

HELD_EVERY_S = 5.0
REASON = SESSION_COLUMNS.index("reason")


def with_gang(row: tuple[str, ...], rec: dict[str, Any], held: list[dict[str, Any]] | None) -> tuple[str, ...]:
    """The reason cell also says the armed breakpoint, the pause group and the ranks this paused rank holds."""
    extra = []
    if rec.get("breakpoint_id"):
        extra.append(f"bp {rec['breakpoint_id']}")
    if rec.get("group"):
        extra.append(f"group {rec['group']}")
    if held:
        extra.append(f"holds ranks {rank_ranges([int(h['world_rank']) for h in held])}")
    if not extra:
        return row
    cells = list(row)
    cells[REASON] = " · ".join([cells[REASON], *extra])
    return tuple(cells)


class SessionsPane(Vertical):
    """A table of session records; rows are cached by session so 500 sessions stay cheap."""

    BINDINGS = [
        Binding("escape", "clear_filter", "Clear filter", show=False),
    ]

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.border_title = "Paused sessions"
        self.sessions: list[dict[str, Any]] = []
        self.filter_text = ""
        self._shown: list[str] = []  # session ids, in table order
        self._cache: dict[str, tuple[dict[str, Any], tuple[str, ...]]] = {}
        self._seen: set[str] | None = None  # None until the first list: no notices for it
        self.held: dict[str, list[dict[str, Any]]] = {}  # session id -> ranks it holds (Train)
        self._held_at = 0.0

    def compose(self) -> ComposeResult:
        yield Input(placeholder="filter sessions (Esc clears)", id="session-filter")
        yield RowTable(SESSION_COLUMNS, id="sessions-table")

    def on_mount(self) -> None:
        self.query_one(Input).display = False

    @property
    def table(self) -> RowTable:
        return self.query_one("#sessions-table", RowTable)

    def update_sessions(self, sessions: list[dict[str, Any]]) -> None:
        self._notify_new(sessions)
        unique = {str(r.get("id")): r for r in sessions}
        self._cache = {k: v for k, v in self._cache.items() if k in unique}
        self.sessions = sorted(unique.values(), key=lambda r: -float(r.get("since", 0)))
        self._render_rows()
        self._refresh_held()

    def _refresh_held(self) -> None:
        """Paused Train ranks: ask the gateway's stacks which ranks they hold (every HELD_EVERY_S)."""
        runs = sorted({(str(r.get("job_id") or ""), str(r["train_run"])) for r in self.sessions if r.get("train_run")})
        gw = getattr(self.screen, "gateway", None)
        if not runs or gw is None or not hasattr(gw, "stacks") or time.monotonic() - self._held_at < HELD_EVERY_S:
            return
        self._held_at = time.monotonic()
        self._fetch_held(gw, runs)

    @work(exclusive=True, group="held")
    async def _fetch_held(self, gw: Any, runs: list[tuple[str, str]]) -> None:
        held: dict[str, list[dict[str, Any]]] = {}
        for job, run in runs:
            try:
                held.update(held_by_session(self.sessions, await gw.stacks(job, run)))
            except Exception:
                continue  # the rows stay as they are; the next list asks again
        if held != self.held:
            self.held = held
            self._cache.clear()
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
        now = time.time()
        wanted = [
            (str(r["id"]), self._row(r, now))
            for r in self.sessions
            if session_matches(r, self.filter_text)
        ]
        self.table.set_rows(wanted)
        self._shown = [key for key, _ in wanted]
        total = len(self.sessions)
        shown = f"{len(self._shown)}/{total}" if self.filter_text else str(total)
        set_border_title(self, f"Paused sessions ({shown})")

    def _row(self, rec: dict[str, Any], now: float) -> tuple[str, ...]:
        """The row's cells; reused while the record and its age text stay the same."""
        key = str(rec["id"])
        cached = self._cache.get(key)
        paused = age(float(rec.get("since", 0)), now)
        if cached is not None and cached[0] == rec and cached[1][2] == paused:
            return cached[1]
        row = with_gang(session_row(rec, now), rec, self.held.get(key))
        self._cache[key] = (rec, row)
        return row

    def selected_id(self) -> str | None:
        return self.table.cursor_key

    def on_row_table_selected(self, event: RowTable.Selected) -> None:
        event.stop()
        self.post_message(AttachRequested(event.key))

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
