"""Events pane: memory-monitor kills and other registry events; Enter shows the explanation."""

from __future__ import annotations

import json
from typing import Any

from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import VerticalScroll
from textual.screen import ModalScreen
from textual.widgets import Static

from raydbg.tui.format import EVENT_COLUMNS, event_row
from raydbg.tui.row_table import Row, RowTable, set_border_title


class EventsPane(RowTable):
    """Events from ``GET /api/v1/events``, newest first."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(EVENT_COLUMNS, **kwargs)
        self.border_title = "Events"
        self.events: dict[str, dict[str, Any]] = {}

    def update_events(self, events: list[dict[str, Any]]) -> None:
        keyed = {str(e.get("id") or f"{e.get('ts')}-{i}"): e for i, e in enumerate(events)}
        order = sorted(keyed, key=lambda k: -float(keyed[k].get("ts", 0)))
        wanted = [(key, self._row(key, keyed[key])) for key in order]
        self.set_rows(wanted)
        self.events = keyed
        set_border_title(self, f"Events ({len(order)})")

    def _row(self, key: str, event: dict[str, Any]) -> Row:
        old = self.events.get(key)
        if old is not None and old == event:
            return self._rows[key]  # the same tuple: RowTable skips it by identity
        return event_row(event)

    def on_row_table_selected(self, event: RowTable.Selected) -> None:
        event.stop()
        chosen = self.events.get(event.key)
        if chosen is not None:
            self.app.push_screen(EventDetail(chosen))


class EventDetail(ModalScreen[None]):
    """The whole event: message and every detail the monitor recorded."""

    BINDINGS = [Binding("escape,q,enter", "dismiss", "Close")]

    def __init__(self, event: dict[str, Any]) -> None:
        super().__init__()
        self.event = event

    def compose(self) -> ComposeResult:
        title = Text.assemble((str(self.event.get("kind", "")), "bold"), "  ")
        title.append(str(self.event.get("message", "")))
        details = json.dumps(self.event.get("details", {}), indent=2, sort_keys=True)
        with VerticalScroll(id="event-detail"):
            yield Static(title)
            yield Static(Text(details))
