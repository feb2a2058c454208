"""Who is told when a debug session opens: a list the composition fills (no import cost in a worker)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

# Called with each new session's record once it is listed; activation adds the start of
# the node's agent (a core knows no agent host).
ON_PAUSE: list[Callable[[Any], None]] = []
