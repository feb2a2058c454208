"""Which ranks a paused Train rank holds, and rank lists as text (pure: records and stacks as dicts).

`raydbg list` (raydbg/commands/list_sessions.py) and the TUI's sessions pane both show them; the stacks
answer they read is the gateway's `GET /api/v1/stacks` (docs/hangs.md).
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import Any

from raydbg.gang import pause


def rank_ranges(ranks: Sequence[int]) -> str:
    """[1, 2, 3, 5] -> '1-3,5'."""
    parts: list[str] = []
    rs = sorted(set(ranks))
    i = 0
    while i < len(rs):
        j = i
        while j + 1 < len(rs) and rs[j + 1] == rs[j] + 1:
            j += 1
        parts.append(str(rs[i]) if i == j else f"{rs[i]}-{rs[j]}")
        i = j + 1
    return ",".join(parts)


def held_by_session(recs: list[dict[str, Any]], stacks: dict[str, Any]) -> dict[str, list[dict[str, Any]]]:
    """For each paused Train session: the other ranks of its run that are held, with their class."""
    classes = {c.get("id"): c for c in stacks.get("classes") or []}
    out: dict[str, list[dict[str, Any]]] = {}
    for run in stacks.get("runs") or []:
        held = [
            {"world_rank": r.get("world_rank"), "state": r.get("state"), "class_id": r.get("class_id"),
             "summary": (classes.get(r.get("class_id")) or {}).get("summary", ""),
             "in_collective": r.get("world_rank") in (run.get("waiting") or []),
             "last_progress_s": r.get("last_progress_s"), "node_id": r.get("node_id"), "pid": r.get("pid")}
            for r in run.get("ranks") or [] if r.get("state") != "paused"
        ]
        for rec in recs:
            if rec.get("train_run") == run.get("run") and rec.get("job_id") == run.get("job_id"):
                out[str(rec["id"])] = held
    return out


def held_lines(recs: list[dict[str, Any]]) -> list[str]:
    """Text under `raydbg list`'s table: pause groups, then what each paused rank holds, one class a line."""
    lines = []
    for g in pause.groups(recs):
        ranks = [r for r in g["ranks"] if r is not None]
        size = g.get("world_size") or "?"
        lines.append(f"group {g['group']}: ranks {rank_ranges(ranks)} ({len(ranks)}/{size}) of run {g['train_run']} "
                     f"at {os.path.basename(str(g['file']))}:{g['line']}  (raydbg continue {g['group']})")
    shown: set[tuple[Any, ...]] = set()
    for rec in recs:
        held = rec.get("held") or []
        if not held:
            if rec.get("held_error") and ("err", rec.get("train_run")) not in shown:
                shown.add(("err", rec.get("train_run")))
                lines.append(f"run {rec.get('train_run')}: held ranks unknown ({rec['held_error']})")
            continue
        key = (rec.get("job_id"), rec.get("train_run"), tuple(h["world_rank"] for h in held))
        if key in shown:
            continue
        shown.add(key)
        by_class: dict[Any, list[dict[str, Any]]] = {}
        for h in held:
            by_class.setdefault(h.get("class_id"), []).append(h)
        who = "rank " + str(rec.get("train_rank")) if rec.get("group") is None else f"group {rec['group']}"
        for members in by_class.values():
            ranks = [int(h["world_rank"]) for h in members]
            lines.append(f"  held by {who} of run {rec.get('train_run')}: ranks {rank_ranges(ranks)}: "
                         f"{members[0].get('summary') or members[0].get('state')}")
    return lines
