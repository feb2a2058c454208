"""Removes session records whose worker died (a killed paused worker never cleans up itself)."""

from __future__ import annotations

import logging
from typing import Any

import psutil

from raydbg import registry

log = logging.getLogger("raydbg.agent")


def dead_sessions(records: list[dict[str, Any]], node_id: str, alive_nodes: set[str] | None) -> list[dict[str, Any]]:
    """Records of this node whose pid is gone, plus (on the gateway) those of dead nodes."""
    dead = []
    for rec in records:
        node = rec.get("node_id")
        if node == node_id:
            if not psutil.pid_exists(int(rec.get("pid", 0))):
                dead.append(rec)
        elif alive_nodes is not None and node not in alive_nodes:
            dead.append(rec)
    return dead


def collect(node_id: str, alive_nodes: set[str] | None = None) -> int:
    removed = 0
    for rec in dead_sessions(registry.sessions(), node_id, alive_nodes):
        registry.delete(registry.SESSION + rec["id"])
        registry.record_event(
            "session.collected",
            f"session {rec['id']} removed: worker {rec.get('pid')} is gone",
            node_id=str(rec.get("node_id", "")), session=rec["id"], pid=rec.get("pid"),
        )
        removed += 1
    return removed
