"""What `raydbg pause TARGET` names, and which worker that is (pure, records as dicts).

TARGET is a Train rank `RUN:RANK`, a worker pid (`PID`, or `NODE:PID` where a pid is on
several nodes; NODE a prefix of the node id), or a stack class id from `raydbg stacks
--json` (its first member, the lowest rank, stands for it).
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

_CLASS_ID = re.compile(r"[0-9a-f]{10}")  # classes.class_id: sha1 hex, 10 characters
_MAX_PID_DIGITS = 9  # pid_max is at most 2**22 on Linux: a 10-digit number is a class id


class BadTarget(ValueError):
    """The target names nothing (or more than one worker); the message says what to use."""


@dataclass(frozen=True)
class Target:
    kind: str  # "rank" | "pid" | "class"
    run: str = ""
    rank: int = -1
    node: str = ""  # a node id prefix, for a pid
    pid: int = 0
    class_id: str = ""


@dataclass(frozen=True)
class Worker:
    node_id: str
    pid: int
    train_run: str | None = None
    world_rank: int | None = None


def parse(text: str) -> Target:
    text = text.strip()
    head, sep, tail = text.rpartition(":")
    if sep and head and tail.isdigit():
        if re.fullmatch(r"[0-9a-f]+", head) and len(tail) <= _MAX_PID_DIGITS and not _looks_like_run(head):
            return Target("pid", node=head, pid=int(tail))
        return Target("rank", run=head, rank=int(tail))
    if text.isdigit() and len(text) <= _MAX_PID_DIGITS:
        return Target("pid", pid=int(text))
    if _CLASS_ID.fullmatch(text):
        return Target("class", class_id=text)
    raise BadTarget(f"cannot read {text!r} as a target: give RUN:RANK, a pid, NODE:PID or a stack "
                    f"class id from `raydbg stacks --json`")


def _looks_like_run(head: str) -> bool:
    # A node id prefix is hex of 8+ characters; a run name that is short hex ("ab:1") stays a run.
    return len(head) < 8


def _rank_matches(run: str, rank: int, w: dict[str, Any]) -> bool:
    return w.get("world_rank") == rank and run in (w.get("train_run"), w.get("train_run_id"))


def from_beats(target: Target, beats: Iterable[dict[str, Any]]) -> Worker | None:
    """The worker a rank or pid target names among progress beats; None when they do not know it."""
    found = {(str(b.get("node_id")), int(b.get("pid") or 0)): b for b in beats if _names(target, b)}
    return _one(target, found)


def from_stacks(target: Target, report: dict[str, Any]) -> Worker | None:
    """The worker any target names in a /api/v1/stacks answer; None when it does not know it."""
    if target.kind == "class":
        cls = next((c for c in report.get("classes") or [] if c.get("id") == target.class_id), None)
        if cls is None:
            return None
        first = (cls.get("members") or [{}])[0]
        return Worker(str(first.get("node_id")), int(first.get("pid") or 0), cls.get("train_run"),
                      first.get("world_rank"))
    found = {(str(w.get("node_id")), int(w.get("pid") or 0)): w for w in report.get("workers") or []
             if _names(target, w)}
    return _one(target, found)


def _names(target: Target, rec: dict[str, Any]) -> bool:
    if target.kind == "rank":
        return _rank_matches(target.run, target.rank, rec)
    if target.kind == "pid":
        return int(rec.get("pid") or 0) == target.pid and str(rec.get("node_id") or "").startswith(target.node)
    return False


def _one(target: Target, found: dict[tuple[str, int], dict[str, Any]]) -> Worker | None:
    if not found:
        return None
    if len(found) > 1:
        if target.kind == "pid":
            nodes = ", ".join(sorted(n[:12] for n, _ in found))
            raise BadTarget(f"pid {target.pid} is on several nodes ({nodes}): give NODE:{target.pid}")
        pids = ", ".join(f"{p} on {n[:12]}" for n, p in sorted(found))
        raise BadTarget(f"rank {target.rank} of {target.run} is more than one worker ({pids}): give its pid")
    (node_id, pid), rec = next(iter(found.items()))
    return Worker(node_id, pid, rec.get("train_run"), rec.get("world_rank"))


def not_found(target: Target) -> str:
    if target.kind == "rank":
        return f"no rank {target.rank} of a Train run named {target.run}: see `raydbg stacks` or `raydbg steps`"
    if target.kind == "pid":
        return f"no raydbg-activated worker with pid {target.pid}: see `raydbg stacks`"
    return f"no stack class {target.class_id}: class ids change as the stacks do; see `raydbg stacks --json`"
