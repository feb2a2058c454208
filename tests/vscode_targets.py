"""Code the VS Code integration test pauses in a Ray worker; the pause line has a `# BP:` marker."""

from __future__ import annotations

from pathlib import Path

from bp_markers import marker_line

FILE = str(Path(__file__).resolve())


def line_of(marker: str) -> int:
    return marker_line(__file__, marker)


def vscode_paused_task(x: int) -> int:
    local_value = x * 3
    breakpoint()  # BP:vscode
    return local_value + 1
