"""Stack pane: the paused thread's frames; selecting one moves source and variables there.

Frames of Ray, raydbg, the standard library and other installed packages are dimmed,
and runs of them are folded into one line (Enter on it, or `f`, unfolds): a user's
stack shows their functions next to each other. Which frames are internal is decided
by the one frame filter raydbg has (raydbg.gang.frames).
"""

from __future__ import annotations

import os
from typing import Any

from rich.text import Text
from textual.widgets import OptionList
from textual.widgets.option_list import Option

from raydbg.dap.types import StackFrame
from raydbg.gang.frames import is_internal
from raydbg.tui.messages import FrameSelected

FOLD_MIN = 2  # a lone library frame is dimmed, not folded


def internal(frame: StackFrame) -> bool:
    path = str(frame.get("source", {}).get("path", "") or "")
    return is_internal({"file": path, "line": frame.get("line") or 0, "function": frame.get("name")})


def rows(frames: list[StackFrame], folded: bool, selected: int = 0) -> list[tuple[str, list[int]]]:
    """("frame", [i]) per shown frame and ("fold", [i, j, ...]) per folded run (pure).

    The selected frame is never folded away, nor the innermost one.
    """
    out: list[tuple[str, list[int]]] = []
    run: list[int] = []

    def flush() -> None:
        if len(run) >= FOLD_MIN:
            out.append(("fold", list(run)))
        else:
            out.extend(("frame", [i]) for i in run)
        run.clear()

    for index, frame in enumerate(frames):
        if folded and index not in (0, selected) and internal(frame):
            run.append(index)
            continue
        flush()
        out.append(("frame", [index]))
    flush()
    return out


def focus_index(frames: list[StackFrame], record: dict[str, Any]) -> int:
    """The frame a session's record names (its file and line), else the top one (pure)."""
    file, line = str(record.get("file") or ""), record.get("line")
    for index, frame in enumerate(frames):
        path = str(frame.get("source", {}).get("path", "") or "")
        if frame.get("line") == line and path and (path == file or os.path.basename(path) == os.path.basename(file)):
            return index
    return 0


class StackView(OptionList):
    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.border_title = "Stack"
        self._loading = False
        self.folded = True
        self.frames: list[StackFrame] = []
        self.selected = 0
        self.shown: list[tuple[str, list[int]]] = []

    def show(self, frames: list[StackFrame], selected: int = 0) -> None:
        self.frames, self.selected = list(frames), selected
        self._render_rows()

    def toggle_folding(self) -> None:
        self.folded = not self.folded
        self._render_rows()

    def _render_rows(self) -> None:
        self._loading = True
        self.clear_options()
        self.shown = rows(self.frames, self.folded, self.selected)
        highlight = 0
        for position, (kind, indexes) in enumerate(self.shown):
            if kind == "fold":
                names = ", ".join(str(self.frames[i].get("name", "?")) for i in indexes[:2])
                more = ", ..." if len(indexes) > 2 else ""
                label = Text(f"  ⋯ {len(indexes)} library frames ({names}{more})", style="dim italic")
            else:
                index = indexes[0]
                highlight = position if index == self.selected else highlight
                label = self._frame_label(self.frames[index])
            self.add_option(Option(label, id=f"{kind}-{indexes[0]}"))
        if self.shown:
            self.highlighted = highlight
        self.border_title = "Stack" if self.folded else "Stack (all frames)"
        self._loading = False

    @staticmethod
    def _frame_label(frame: StackFrame) -> Text:
        path = frame.get("source", {}).get("path", "")
        where = f"  {os.path.basename(path)}:{frame.get('line', '?')}"
        if internal(frame):
            return Text.assemble((str(frame.get("name", "?")), "dim"), (where, "dim"))
        return Text.assemble((str(frame.get("name", "?")), "bold"), (where, "dim"))

    def frame_index(self, option_index: int) -> int | None:
        """The frame an option stands for (None for a fold)."""
        kind, indexes = self.shown[option_index]
        return indexes[0] if kind == "frame" else None

    def on_option_list_option_selected(self, event: OptionList.OptionSelected) -> None:
        event.stop()
        index = self.frame_index(event.option_index)
        if index is None:  # Enter on a fold opens every frame, the cursor on the run's first
            first = self.shown[event.option_index][1][0]
            self.toggle_folding()
            self.highlighted = self.shown.index(("frame", [first]))
            return
        self.selected = index
        self.post_message(FrameSelected(index))
