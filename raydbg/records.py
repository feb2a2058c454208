"""Session records: ids and the pure helpers that name and describe one (no Ray import); the fields are raydbg.schema.SessionRecord."""

from __future__ import annotations

import secrets
import time
from typing import Any


def new_session_id() -> str:
    return secrets.token_hex(6)


def label(rec: dict[str, Any]) -> str:
    """Short human name of what paused: `Actor.method`, `task`, plus the Train rank."""
    name = rec.get("task_name") or rec.get("actor_name") or rec.get("function") or "?"
    if rec.get("train_rank") is not None:
        size = rec.get("train_world_size")
        name += f" [rank {rec['train_rank']}" + (f"/{size}" if size else "") + "]"
    return str(name)


def reason_text(rec: dict[str, Any]) -> str:
    exc = rec.get("exception")
    if rec.get("reason") == "exception" and exc:
        return f"{exc.get('type')}: {exc.get('message')}"
    return str(rec.get("reason", ""))


def paused_for(rec: dict[str, Any], now: float | None = None) -> str:
    secs = max(0.0, (now or time.time()) - float(rec.get("since", 0)))
    if secs < 60:
        return f"{secs:.0f}s"
    if secs < 3600:
        return f"{secs // 60:.0f}m{secs % 60:02.0f}s"
    return f"{secs // 3600:.0f}h{(secs % 3600) // 60:02.0f}m"
