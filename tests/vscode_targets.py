"""Code the VS Code integration test pauses in a Ray worker; the pause line has a `# BP:` marker."""

from __future__ import annotations

from pathlib import Path

FILE = str(Path(__file__).resolve())


def line_of(marker: str) -> int:
    for number, text in enumerate(Path(__file__).read_text().splitlines(), start=1):
        if f"# BP:{marker}" in text:
            return number
    raise KeyError(marker)


def vscode_paused_task(x: int) -> int:
    local_value = x * 3
    breakpoint()  # BP:vscode
    return local_value + 1
