"""Stack pane: the paused thread's frames; selecting one moves source and variables there."""

from __future__ import annotations

import os
from typing import Any

from rich.text import Text
from textual.widgets import OptionList
from textual.widgets.option_list import Option

from raydbg.dap.types import StackFrame
from raydbg.tui.messages import FrameSelected


class StackView(OptionList):
    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.border_title = "Stack"
        self._loading = False

    def show(self, frames: list[StackFrame], selected: int = 0) -> None:
        self._loading = True
        self.clear_options()
        for index, frame in enumerate(frames):
            path = frame.get("source", {}).get("path", "")
            label = Text.assemble(
                (str(frame.get("name", "?")), "bold"),
                (f"  {os.path.basename(path)}:{frame.get('line', '?')}", "dim"),
            )
            self.add_option(Option(label, id=str(index)))
        if frames:
            self.highlighted = selected
        self._loading = False

    def on_option_list_option_selected(self, event: OptionList.OptionSelected) -> None:
        event.stop()
        self.post_message(FrameSelected(event.option_index))
