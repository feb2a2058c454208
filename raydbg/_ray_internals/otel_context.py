"""Whether an OpenTelemetry span or baggage is current, without importing OpenTelemetry.

What raydbg's Ray tracing shortcuts ask before each task call (tracing.py, task_submit.py).
Written for Ray 2.51.x to 2.60.x with the rest of the package, but relies on no Ray internal:
OpenTelemetry's public `opentelemetry.context.get_current()` only.
"""

from __future__ import annotations

import sys


def in_context() -> bool:
    """A span or baggage is current (never true before OpenTelemetry was imported)."""
    get_current = getattr(sys.modules.get("opentelemetry.context"), "get_current", None)
    if get_current is None:
        return False
    try:
        return bool(get_current())
    except Exception:  # half imported by another thread right now: nothing can be current yet
        return False
