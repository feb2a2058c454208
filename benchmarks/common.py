"""What several benchmarks share: the repository's root and a free port.

A benchmark runs as a script (`python benchmarks/NAME.py`), so this directory is first on
its sys.path and `from common import ...` finds this module.
"""

from __future__ import annotations

import socket
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def free_port() -> int:
    """A loopback TCP port the OS says is free now."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])
