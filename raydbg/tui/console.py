"""Console pane: evaluate expressions in the selected frame, with history, plus process output."""

from __future__ import annotations

from typing import Any

from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Vertical
from textual.widgets import Input, RichLog

from raydbg.tui.format import truncate
from raydbg.tui.messages import EvaluateRequested

RESULT_CHARS = 4000


class HistoryInput(Input):
    """An Input whose Up/Down walk the expressions already entered."""

    BINDINGS = [
        Binding("up", "history(-1)", "Previous", show=False),
        Binding("down", "history(1)", "Next", show=False),
    ]

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.history: list[str] = []
        self.position = 0

    def remember(self, expression: str) -> None:
        if expression and (not self.history or self.history[-1] != expression):
            self.history.append(expression)
        self.position = len(self.history)

    def action_history(self, step: int) -> None:
        if not self.history:
            return
        self.position = max(0, min(len(self.history), self.position + step))
        self.value = self.history[self.position] if self.position < len(self.history) else ""
        self.cursor_position = len(self.value)


class ConsoleView(Vertical):
    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.border_title = "Console"
        self.lines: list[str] = []  # plain text of what was written, for tests and copy

    def compose(self) -> ComposeResult:
        yield RichLog(id="console-log", max_lines=2000, wrap=True, markup=False)
        yield HistoryInput(placeholder="evaluate in the selected frame (Enter)", id="console-input")

    def write(self, text: str, style: str = "") -> None:
        text = truncate(text, RESULT_CHARS) if "\n" not in text else text[:RESULT_CHARS]
        self.lines.append(text)
        self.query_one(RichLog).write(Text(text, style=style))

    def on_input_submitted(self, event: Input.Submitted) -> None:
        event.stop()
        expression = event.value.strip()
        box = self.query_one(HistoryInput)
        box.remember(expression)
        box.value = ""
        if expression:
            self.write(f">>> {expression}", "bold cyan")
            self.post_message(EvaluateRequested(expression))
