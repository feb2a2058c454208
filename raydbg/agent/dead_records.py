"""Removes session records whose worker died (a killed paused worker never cleans up itself); runs in every node agent.

On the gateway it also removes the records of dead nodes (their sessions and their agent)
and session records nobody can read (malformed or over the size cap: no reader lists them,
so no `raydbg continue` would ever remove them, and a snapshot's locals would stay for ever).
"""

from __future__ import annotations

import logging
import time
from typing import Any

from raydbg import registry, schema, validate
from raydbg.proc_identity import pid_alive

log = logging.getLogger("raydbg.agent")


def dead_sessions(records: list[dict[str, Any]], node_id: str, alive_nodes: set[str] | None) -> list[dict[str, Any]]:
    """Records of this node whose pid is gone, plus (on the gateway) those of dead nodes."""
    dead = []
    for rec in records:
        node = rec.get("node_id")
        if node == node_id:
            if not pid_alive(rec["pid"]):  # records are validated: pid is a sane int
                dead.append(rec)
        elif alive_nodes is not None and node not in alive_nodes:
            dead.append(rec)
    return dead


# An agent record is only dropped once it has stopped beating for this long, so a node
# that joined after the gateway's last look at Ray's node table keeps its fresh agent.
AGENT_STALE_S = 3.0


def dead_agents(agents: list[dict[str, Any]], alive_nodes: set[str], now: float) -> list[dict[str, Any]]:
    """Agent records of nodes Ray does not list alive whose heartbeat has stopped."""
    return [a for a in agents if a.get("node_id") not in alive_nodes
            and now - float(a.get("heartbeat") or a.get("started_at") or 0) > AGENT_STALE_S]


def collect(node_id: str, alive_nodes: set[str] | None = None) -> int:
    """Remove this node's dead sessions; one record that fails never stops the others."""
    removed = 0
    unreadable: list[bytes] = []
    records = registry.sessions(malformed=unreadable if alive_nodes is not None else None)
    for key in unreadable:
        removed += _collect_unreadable(key)
    for rec in dead_sessions(records, node_id, alive_nodes):
        here = rec["node_id"] == node_id
        why = f"worker {rec['pid']} is gone" if here else f"node {rec['node_id']} is dead"
        try:
            registry.delete(registry.SESSION + rec["id"])
            registry.record_event(
                "session.collected", f"session {rec['id']} removed: {why}",
                node_id=rec["node_id"], details=schema.SessionEventDetails(session=rec["id"], pid=rec["pid"]),
            )
            removed += 1
        except Exception:
            log.exception("raydbg agent: could not collect session %s", rec["id"])
    if alive_nodes is not None:
        collect_agents(alive_nodes)
    return removed


def _collect_unreadable(key: bytes) -> int:
    shown = validate.escape(key.decode(errors="replace"), 160)  # any bytes can sit in a key
    try:
        registry.delete(key)
        registry.record_event("session.collected", f"session record {shown} removed: it cannot be read",
                              details=schema.UnreadableSessionDetails(key=shown))
        return 1
    except Exception:
        log.exception("raydbg agent: could not remove unreadable record %s", shown)
        return 0


def collect_agents(alive_nodes: set[str]) -> None:
    """On the gateway: drop the agent records of dead nodes (their agent cannot do it)."""
    for agent in dead_agents(registry.agents(), alive_nodes, time.time()):
        try:
            registry.delete(registry.AGENT + str(agent["node_id"]))
            registry.record_event(
                "agent.collected", f"agent of node {agent['node_id']} removed: the node is dead",
                node_id=str(agent["node_id"]), details=schema.AgentCollectedDetails(pid=agent.get("pid")),
            )
        except Exception:
            log.exception("raydbg agent: could not collect agent of node %s", agent.get("node_id"))
