"""What several benchmarks share: the repository's root (on sys.path), and a free port.

A benchmark runs as a script (`python benchmarks/NAME.py`), so this directory is first on
its sys.path and `from common import ...` finds this module. Importing it puts the
repository's root on sys.path too: the suite's helpers are then the package `tests`
(`from tests.cluster import Cluster`, the one test-cluster helper), imported by their own
name, never by putting tests/ itself on the path.
"""

from __future__ import annotations

import socket
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:
    sys.path.insert(1, str(REPO))  # after this script's directory


def free_port() -> int:
    """A loopback TCP port the OS says is free now."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])
