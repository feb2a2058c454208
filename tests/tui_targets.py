"""Ray tasks that pause for the TUI end-to-end tests; pause lines carry `# BP:<name>`."""

from __future__ import annotations

import os
from pathlib import Path

from bp_markers import marker_line

FILE = str(Path(__file__).resolve())


def line_of(marker: str) -> int:
    return marker_line(__file__, marker)


def scaled_sum(values: list[int], factor: int) -> int:
    scaled = [v * factor for v in values]
    breakpoint()  # BP:tui
    total = sum(scaled)
    total += factor
    return total


def pid_then_pause(n: int) -> int:
    pid = os.getpid()
    breakpoint()  # BP:doomed
    return pid + n
