"""Source pane: the file around the current line, syntax coloured, the line marked."""

from __future__ import annotations

import os
from typing import Any

from rich.syntax import Syntax
from rich.text import Text
from textual.containers import VerticalScroll
from textual.widgets import Static

WINDOW = 200  # lines shown either side of the current one; huge files stay cheap


class SourceView(VerticalScroll):
    """Shows ``lines`` with ``line`` (1-based) highlighted and scrolled into the middle."""

    can_focus = True

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.border_title = "Source"
        self.path = ""
        self.line = 0
        self.lines: list[str] = []
        self.first = 1  # line number of the first rendered line

    def compose(self) -> Any:
        yield Static(Text("attaching…", style="dim"), id="source-text")

    def show(self, path: str, line: int, lines: list[str]) -> None:
        self.path, self.line, self.lines = path, line, lines
        self.border_title = f"{os.path.basename(path) or '?'}:{line}"
        body = self.query_one("#source-text", Static)
        if not lines:
            body.update(Text(f"source of {path or '?'} is not available", style="dim"))
            return
        start = max(1, line - WINDOW)
        end = min(len(lines), line + WINDOW)
        self.first = start
        syntax = Syntax(
            "\n".join(lines[start - 1 : end]),
            "python" if path.endswith(".py") or not path else Syntax.guess_lexer(path),
            line_numbers=True,
            start_line=start,
            highlight_lines={line},
            theme="monokai",
            word_wrap=False,
            indent_guides=False,
        )
        body.update(syntax)
        self.call_after_refresh(self._center)

    def show_message(self, text: str) -> None:
        self.query_one("#source-text", Static).update(Text(text, style="dim"))

    def _center(self) -> None:
        offset = self.line - self.first
        self.scroll_to(y=max(0, offset - self.size.height // 2), animate=False)

    @property
    def current_text(self) -> str:
        """The text of the marked line (what a user reads there)."""
        if 1 <= self.line <= len(self.lines):
            return self.lines[self.line - 1]
        return ""
