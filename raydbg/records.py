"""Session records: the fields a paused worker publishes, as plain JSON (no Ray import)."""

from __future__ import annotations

import dataclasses
import json
import secrets
import time
from dataclasses import dataclass, field
from typing import Any

# "snapshot": a thread `raydbg pause` could not stop yet (blocked in C), pictured with its
# frames and locals; it becomes "starting" (the same id) once the thread returns to Python.
STATES = ("starting", "waiting", "attached", "snapshot")


def new_session_id() -> str:
    return secrets.token_hex(6)


@dataclass
class SessionRecord:
    """One paused thread of one worker; see docs/architecture.md for each field."""

    id: str
    job_id: str
    pid: int
    thread_id: int
    thread_name: str
    file: str
    line: int
    function: str
    reason: str  # "breakpoint" | "exception" | "pause" (raydbg pause)
    node_id: str = ""
    node_ip: str = ""
    task_id: str | None = None
    task_name: str | None = None
    actor_id: str | None = None
    actor_name: str | None = None
    train_rank: int | None = None  # world rank
    train_run: str | None = None  # Ray Train run (experiment) name
    train_local_rank: int | None = None
    train_world_size: int | None = None
    group: str | None = None  # pause group (pause-all): run + file + line + occurrence
    breakpoint_id: str | None = None  # the armed breakpoint (raydbg break add) that paused it
    exception: dict[str, str] | None = None
    since: float = field(default_factory=time.time)
    state: str = "starting"
    cwd: str = ""
    port: int | None = None  # compatibility mode's TCP debugpy port; the API never shows it
    socket: str | None = None  # the worker's private debugger socket; the API never shows it
    frames: list[dict[str, Any]] | None = None  # a snapshot's frames, innermost first, with locals

    @property
    def attachable(self) -> bool:
        return self.state in ("waiting", "attached")

    def to_dict(self) -> dict[str, Any]:
        out = dataclasses.asdict(self)
        out["attachable"] = self.attachable
        return out

    def to_json(self) -> bytes:
        return json.dumps(self.to_dict()).encode()

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> SessionRecord:
        names = {f.name for f in dataclasses.fields(cls)}
        return cls(**{k: v for k, v in data.items() if k in names})


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
