"""Reaching other nodes' agents: which address may be dialled (from Ray, never from a KV record alone), one fan-out.

Anyone who can write the GCS KV can write `agent/<node_id>`; dialling what it says would
hand the cluster token (and the debug session) to whoever listens there. So the IP comes
from Ray's node table (the node must be alive, and the agent runs at its
NodeManagerAddress) and the port from the agent actor itself, asked through Ray.
"""

from __future__ import annotations

import asyncio
import ipaddress
from typing import Any

import aiohttp
from yarl import URL

from raydbg import config, ray_nodes, registry

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

    try:
        handle = ray.get_actor(config.agent_name(node_id), namespace=config.NAMESPACE)
        info: Any = ray.get(handle.info.remote(), timeout=ASK_TIMEOUT_S)
    except Exception:
        return None
    return info if isinstance(info, dict) else None


def resolve(node_id: str, sid: str) -> str:
    """The relay URL of session `sid` on node `node_id`'s agent, or DialRefused (blocking)."""
    ip, port = check(node_id, ray_nodes.nodes(), ask_agent(node_id))
    return relay_url(ip, port, sid)


def agent_base_url(node_id: str, nodes: list[dict[str, Any]]) -> str:
    """`http://ip:port` of another node's agent, by the relay's rule above (blocking)."""
    ip, port = check(node_id, nodes, ask_agent(node_id))
    return f"http://{ip}:{port}"


async def ask_agents(path: str, params: dict[str, str] | None = None, *, token: str, skip_node_id: str = "",
                     timeout_s: float) -> tuple[list[Any], list[dict[str, str]]]:
    """GET `path` from every registered agent but `skip_node_id`'s, in parallel: the JSON
    answers, and one `{"node_id", "error"}` per agent that could not be reached or refused."""
    agents = await asyncio.to_thread(registry.agents)
    others = [a for a in agents if a.get("port") and a.get("node_id") != skip_node_id]
    if not others:
        return [], []
    nodes = await asyncio.to_thread(ray_nodes.nodes)
    answers: list[Any] = []
    errors: list[dict[str, str]] = []
    headers = {"Authorization": f"Bearer {token}"}

    async def one(http: aiohttp.ClientSession, node_id: str) -> None:
        try:
            url = await asyncio.to_thread(agent_base_url, node_id, nodes) + path
            async with http.get(url, params=params, headers=headers) as resp:
                body = await resp.json(content_type=None)
                if resp.status != 200:
                    raise RuntimeError(str(body.get("error") if isinstance(body, dict) else body))
                answers.append(body)
        except Exception as exc:
            errors.append({"node_id": node_id, "error": str(exc) or type(exc).__name__})

    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=timeout_s)) as http:
        await asyncio.gather(*(one(http, str(a.get("node_id"))) for a in others))
    return answers, errors


async def post_agent(node_id: str, path: str, body: Any, *, token: str, timeout_s: float) -> tuple[int, Any]:
    """POST `body` (JSON) to `node_id`'s agent: (HTTP status, JSON answer). Raises DialRefused
    when that agent may not be dialled, aiohttp's errors when it cannot be reached."""
    nodes = await asyncio.to_thread(ray_nodes.nodes)
    url = await asyncio.to_thread(agent_base_url, node_id, nodes) + path
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=timeout_s)) as http:
        async with http.post(url, json=body, headers={"Authorization": f"Bearer {token}"}) as resp:
            return resp.status, await resp.json(content_type=None)
