"""Where the memory monitor reads the kernel's files, and the parsing they share.

`Roots` (the /proc and /sys/fs/cgroup to read) is injectable, so tests run on fake
/proc and /sys trees. Used by node_memory.py (the node) and process_memory.py (each
process).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class Roots:
    """Where to read from; the defaults are the real machine."""

    proc: Path = Path("/proc")
    sys_cgroup: Path = Path("/sys/fs/cgroup")


def read_text(path: Path) -> str | None:
    """The file's text; None when it is gone or unreadable."""
    try:
        return path.read_text()
    except (OSError, ValueError):
        return None


def parse_meminfo(text: str) -> dict[str, int]:
    """/proc/meminfo -> bytes per key."""
    out: dict[str, int] = {}
    for line in text.splitlines():
        name, _, rest = line.partition(":")
        parts = rest.split()
        if not parts:
            continue
        try:
            value = int(parts[0])
        except ValueError:
            continue
        out[name.strip()] = value * 1024 if len(parts) > 1 and parts[1] == "kB" else value
    return out

