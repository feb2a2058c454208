"""Finds the line of a `# BP:<name>` marker in a test-target file (pause lines are marked)."""

from __future__ import annotations

from pathlib import Path


def marker_line(path: str, marker: str) -> int:
    for number, text in enumerate(Path(path).read_text().splitlines(), start=1):
        if f"# BP:{marker}" in text:
            return number
    raise KeyError(marker)
