"""Pause sessions' lifecycles as events for the record, from two looks at the registry (pure; runs in the gateway agent).

`session.paused` (who, where, why), `session.attached`, `session.continued` (how long it was
paused). Only who and where: never a frame's locals, a snapshot's frames or the debugger's socket.
"""

from __future__ import annotations

import secrets
from typing import Any

from raydbg import records

# What the record keeps of a session: identity and place, nothing of the frame's values.
KEPT = ("job_id", "node_id", "node_ip", "pid", "task_name", "actor_name", "train_run", "train_rank",
        "train_world_size", "file", "line", "function", "reason", "group", "breakpoint_id", "since", "state")


def _event(kind: str, rec: dict[str, Any], message: str, ts: float, **more: Any) -> dict[str, Any]:
    details = {k: rec.get(k) for k in KEPT if rec.get(k) is not None}
    exc = rec.get("exception") or {}
    if exc.get("type"):
        details["exception"] = {"type": exc.get("type"), "message": str(exc.get("message") or "")[:300]}
    return {"id": secrets.token_hex(4), "ts": ts, "kind": kind, "node_id": rec.get("node_id") or "",
            "message": message, "details": dict(details, session=rec.get("id"), **more)}


def changes(before: dict[str, dict[str, Any]], after: dict[str, dict[str, Any]], now: float) -> list[dict[str, Any]]:
    """Events for what changed between two listings of the sessions ({id: record})."""
    out = []
    for sid, rec in after.items():
        where = f"{rec.get('file')}:{rec.get('line')} in {rec.get('function')}"
        old = before.get(sid)
        if old is None:
            out.append(_event("session.paused", rec, f"{records.label(rec)} paused at {where} "
                              f"({records.reason_text(rec)})", float(rec.get("since") or now)))
        if rec.get("state") == "attached" and (old is None or old.get("state") != "attached"):
            out.append(_event("session.attached", rec, f"a client attached to {records.label(rec)} at {where}", now))
    for sid, rec in before.items():
        if sid not in after:
            paused = max(0.0, now - float(rec.get("since") or now))
            out.append(_event("session.continued", rec, f"{records.label(rec)} went on after {paused:.0f}s paused "
                              f"(continued, timed out or its worker ended)", now, paused_s=round(paused, 3)))
    return out
