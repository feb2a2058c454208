"""Pause groups and resume requests: which sessions form a group, and the registry keys `continue` writes.

A resume request is a registry key the paused worker polls (raydbg/worker/resume.py):
`resume/session/<id>` for one session, `resume/group/<group>` for every rank of a
pause-all group (kept, so a rank that reaches the line after the group was continued
goes on too; pruned after RESUME_KEEP_S). Pure functions here take records as dicts;
only `request_*` touch the registry.
"""

from __future__ import annotations

import json
import os
import time
from typing import Any

RESUME = "resume/"
RESUME_SESSION = RESUME + "session/"
RESUME_GROUP = RESUME + "group/"
RESUME_KEEP_S = 3600.0


def session_key(sid: str) -> str:
    return RESUME_SESSION + sid


def group_key(group: str) -> str:
    return RESUME_GROUP + group


def groups(sessions: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """One entry per pause group among `sessions`, ranks in order, newest group first."""
    found: dict[str, dict[str, Any]] = {}
    for rec in sessions:
        gid = rec.get("group")
        if not gid:
            continue
        g = found.setdefault(str(gid), {
            "group": gid, "job_id": rec.get("job_id", ""), "train_run": rec.get("train_run"),
            "file": rec.get("file", ""), "line": rec.get("line"),
            "world_size": rec.get("train_world_size"), "since": rec.get("since", 0),
            "sessions": [], "ranks": [],
        })
        g["sessions"].append(rec["id"])
        g["ranks"].append(rec.get("train_rank"))
        g["since"] = min(float(g["since"] or 0), float(rec.get("since", 0)))
    out = list(found.values())
    for g in out:
        pairs = sorted(zip(g["ranks"], g["sessions"], strict=True), key=lambda p: (p[0] is None, p[0] or 0))
        g["ranks"] = [p[0] for p in pairs]
        g["sessions"] = [p[1] for p in pairs]
        size = g["world_size"]
        g["complete"] = bool(size) and len(g["ranks"]) == size
    out.sort(key=lambda g: -float(g["since"]))
    return out


def resolve(target: str, sessions: list[dict[str, Any]]) -> tuple[str, list[str]]:
    """`raydbg continue X`: ("group", ids) when X names a group, ("session", [X]) for a session;
    ("", []) when nothing listed matches."""
    members = [str(r["id"]) for r in sessions if r.get("group") == target]
    if members:
        return "group", members
    if any(str(r.get("id")) == target for r in sessions):
        return "session", [target]
    return "", []


def request_body() -> bytes:
    return json.dumps({"ts": time.time(), "by_pid": os.getpid()}).encode()


def request_session(sid: str) -> None:
    from raydbg import registry

    registry.put(session_key(sid), request_body())


def request_group(group: str) -> None:
    from raydbg import registry

    registry.put(group_key(group), request_body())


def prune(now: float | None = None) -> int:
    """Drop resume requests older than RESUME_KEEP_S (their sessions are long gone)."""
    from raydbg import registry

    now = time.time() if now is None else now
    values = registry.multi_get(registry.keys(RESUME))
    dropped = 0
    for k, raw in values.items():
        try:
            ts = float(json.loads(raw).get("ts", 0))
        except (ValueError, AttributeError):
            ts = 0.0
        if now - ts > RESUME_KEEP_S:
            registry.delete(k)
            dropped += 1
    return dropped
