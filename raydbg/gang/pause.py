"""Pause groups on the gateway: which sessions form a group, and what `raydbg continue X` names (pure, records as dicts).

A rank joins its group in the worker (raydbg/worker/pause_group.py); the resume requests
`continue` writes are the worker's protocol (raydbg/worker/resume.py).
"""

from __future__ import annotations

from typing import Any


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


def bulk_targets(sessions: list[dict[str, Any]], job: str | None) -> tuple[list[str], list[str]]:
    """The session ids and pause groups a bulk continue resumes: `job`'s (None: every job's)."""
    chosen = [r for r in sessions if r.get("id") and (job is None or str(r.get("job_id") or "") == job)]
    ids = [str(r["id"]) for r in chosen]
    groups = sorted({str(r["group"]) for r in chosen if r.get("group")})
    return ids, groups
