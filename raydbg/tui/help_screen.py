"""Help screen (`?`): every key of the app in one table."""

from __future__ import annotations

from rich.table import Table
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import VerticalScroll
from textual.screen import ModalScreen
from textual.widgets import Static

KEYS = [
    ("Sessions", "Enter", "attach to the selected session"),
    ("Sessions", "/", "filter sessions (Esc clears)"),
    ("Events", "Enter", "show why (the event's details)"),
    ("Main", "g", "gang view: stack classes of a Train run or job"),
    ("Main", "b", "armed breakpoints, per job"),
    ("Breakpoints", "x / X", "remove one / all of its job"),
    ("Debug", "c", "continue"),
    ("Debug", "n", "next line (step over)"),
    ("Debug", "s", "step in"),
    ("Debug", "u", "step out (up)"),
    ("Debug", "d", "detach: the task goes on"),
    ("Debug", "e", "console: evaluate in the selected frame"),
    ("Debug", "f", "stack: show / fold Ray's and library frames"),
    ("Debug", "Esc", "back to the source pane"),
    ("Debug", "Up/Down", "console history"),
    ("All", "Tab / Shift+Tab", "move between panes"),
    ("All", "?", "this help"),
    ("All", "q", "quit (detaches first; the task goes on)"),
]


class HelpScreen(ModalScreen[None]):
    BINDINGS = [Binding("escape,q,question_mark", "dismiss", "Close")]

    def compose(self) -> ComposeResult:
        table = Table(title="raydbg keys", expand=True)
        for column in ("where", "key", "does"):
            table.add_column(column)
        for row in KEYS:
            table.add_row(*row)
        with VerticalScroll(id="help"):
            yield Static(table)
