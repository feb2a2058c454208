"""Pure text helpers for the TUI: sizes, memory bars, ages, rows, truncation (no Textual)."""

from __future__ import annotations

import os
import time
from typing import Any

from rich.text import Text

from raydbg import records

SESSION_COLUMNS = ("what", "where", "paused", "state", "node", "pid", "reason", "job", "id")
NODE_COLUMNS = ("node", "memory", "gpu", "workers", "agent")
EVENT_COLUMNS = ("time", "kind", "node", "message")


def human_bytes(size: float | None) -> str:
    """1536 -> '1.5K'; binary units, short enough for a table cell."""
    if size is None:
        return "?"
    value = float(size)
    for unit in ("B", "K", "M", "G", "T"):
        if abs(value) < 1024 or unit == "T":
            return f"{value:.0f}{unit}" if unit == "B" else f"{value:.1f}{unit}"
        value /= 1024
    return f"{value:.1f}T"  # unreachable; keeps mypy happy


def bar(used: float, limit: float, width: int = 10) -> Text:
    """A coloured bar for used/limit: green, yellow from 80%, red from 95%."""
    ratio = 0.0 if limit <= 0 else max(0.0, min(1.0, used / limit))
    full = round(ratio * width)
    style = "green" if ratio < 0.8 else "yellow" if ratio < 0.95 else "bold red"
    return Text.assemble(("█" * full, style), ("░" * (width - full), "dim"))


def memory_cell(memory: dict[str, Any] | None, width: int = 10) -> Text:
    if not memory or not memory.get("limit"):
        return Text("n/a", style="dim")
    used, limit = float(memory.get("used") or 0), float(memory["limit"])
    text = bar(used, limit, width)
    text.append(f" {human_bytes(used)}/{human_bytes(limit)} {100 * used / limit:.0f}%")
    return text


def gpus_cell(gpus: list[dict[str, Any]] | None) -> str:
    """'0:2.0G/80.0G 1:…' from whatever per-GPU fields the gateway sends."""
    if not gpus:
        return "-"
    parts = []
    for i, gpu in enumerate(gpus):
        index = gpu.get("index", i)
        used = gpu.get("used", gpu.get("memory_used"))
        total = gpu.get("total", gpu.get("limit", gpu.get("memory_total")))
        parts.append(f"{index}:{human_bytes(used)}/{human_bytes(total)}")
    return " ".join(parts)


def node_row(node: dict[str, Any]) -> tuple[str | Text, ...]:
    name = str(node.get("node_ip") or str(node.get("node_id", ""))[:12])
    if node.get("is_head"):
        name += " (head)"
    if not node.get("alive", True):
        agent = "node dead"
    elif node.get("agent"):
        agent = "up"
    else:
        agent = "no agent"
    return (
        name,
        memory_cell(node.get("memory")),
        gpus_cell(node.get("gpus")),
        str(node.get("workers", "?")),
        agent,
    )


def age(since: float, now: float | None = None) -> str:
    """Coarse age ('12s', '4m', '2h05m'): changes rarely, so 500 rows redraw cheaply."""
    secs = max(0, int((now if now is not None else time.time()) - since))
    if secs < 60:
        return f"{secs}s"
    if secs < 3600:
        return f"{secs // 60}m"
    return f"{secs // 3600}h{(secs % 3600) // 60:02d}m"


def session_state(rec: dict[str, Any]) -> str:
    return {"starting": "starting", "waiting": "waiting", "attached": "attached"}.get(
        str(rec.get("state")), str(rec.get("state", "?"))
    )


def session_row(rec: dict[str, Any], now: float | None = None) -> tuple[str, ...]:
    return (
        records.label(rec),
        f"{os.path.basename(str(rec.get('file', '')))}:{rec.get('line', '?')}",
        age(float(rec.get("since", 0)), now),
        session_state(rec),
        str(rec.get("node_ip") or str(rec.get("node_id", ""))[:12]),
        str(rec.get("pid", "")),
        truncate(records.reason_text(rec), 40),
        str(rec.get("job_id", "")),
        str(rec.get("id", "")),
    )


def session_matches(rec: dict[str, Any], needle: str) -> bool:
    """Case-insensitive substring match on every field a user might type."""
    if not needle:
        return True
    needle = needle.lower()
    hay = " ".join(session_row(rec, 0)) + f" {rec.get('file', '')} {rec.get('function', '')}"
    return needle in hay.lower()


def event_row(event: dict[str, Any]) -> tuple[str, ...]:
    ts = float(event.get("ts", 0))
    when = time.strftime("%H:%M:%S", time.localtime(ts)) if ts else "?"
    return (
        when,
        str(event.get("kind", "")),
        str(event.get("node_id", ""))[:12],
        truncate(str(event.get("message", "")), 200),
    )


def truncate(text: str, limit: int) -> str:
    """Cut to ``limit`` characters on one line, saying how much was left out."""
    text = text.replace("\n", "⏎")
    if len(text) <= limit:
        return text
    keep = max(0, limit - len(f"… (+{len(text)})"))
    return f"{text[:keep]}… (+{len(text) - keep})"


def last_line(message: str) -> str:
    """The line of a traceback that says what went wrong."""
    lines = [line for line in message.strip().splitlines() if line.strip()]
    return lines[-1].strip() if lines else message
