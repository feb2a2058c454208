"""Which node agent the gateway's relay may dial: addresses from Ray, never from a KV record alone.

Anyone who can write the GCS KV can write `agent/<node_id>`; dialling what it says would
hand the cluster token (and the debug session) to whoever listens there. So the IP comes
from Ray's node table (the node must be alive, and the agent runs at its
NodeManagerAddress) and the port from the agent actor itself, asked through Ray.
"""

from __future__ import annotations

import ipaddress
from typing import Any

from yarl import URL

ASK_TIMEOUT_S = 5.0


class DialRefused(Exception):
    """The relay will not dial this node's agent; the message says why, in one line."""


def check(node_id: str, nodes: list[dict[str, Any]], reported: dict[str, Any] | None) -> tuple[str, int]:
    """(ip, port) of `node_id`'s agent, given Ray's node table and what the agent actor reported.

    Pure: refuses a node Ray does not know or knows dead, an agent that says it is on another
    node or another address, and a port that is not a port.
    """
    node = next((n for n in nodes if n.get("NodeID") == node_id), None)
    if node is None:
        raise DialRefused(f"node {node_id[:16]} is not in Ray's node table")
    if not node.get("Alive"):
        raise DialRefused(f"node {node_id[:16]} is dead")
    ip = str(node.get("NodeManagerAddress") or "")
    try:
        ipaddress.ip_address(ip)
    except ValueError:
        raise DialRefused(f"node {node_id[:16]} has no usable address in Ray's node table") from None
    if not isinstance(reported, dict):
        raise DialRefused(f"node {node_id[:16]} has no raydbg agent")
    if reported.get("node_id") != node_id or reported.get("node_ip") != ip:
        raise DialRefused(f"the agent of node {node_id[:16]} does not run at that node's address")
    port = reported.get("port")
    if isinstance(port, bool) or not isinstance(port, int) or not 0 < port < 65536:
        raise DialRefused(f"the agent of node {node_id[:16]} reports no port")
    return ip, port


def relay_url(ip: str, port: int, sid: str) -> str:
    return str(URL.build(scheme="http", host=ip, port=port, path=f"/api/v1/sessions/{sid}/dap"))


def ask_agent(node_id: str) -> dict[str, Any] | None:
    """The agent actor's own record (blocking Ray call); None if there is none."""
    import ray

    from raydbg.agent.lifecycle import agent_name
    from raydbg.config import NAMESPACE

    try:
        handle = ray.get_actor(agent_name(node_id), namespace=NAMESPACE)
        info: Any = ray.get(handle.info.remote(), timeout=ASK_TIMEOUT_S)
    except Exception:
        return None
    return info if isinstance(info, dict) else None


def resolve(node_id: str, sid: str) -> str:
    """The relay URL of session `sid` on node `node_id`'s agent, or DialRefused (blocking)."""
    import ray

    ip, port = check(node_id, ray.nodes(), ask_agent(node_id))
    return relay_url(ip, port, sid)
