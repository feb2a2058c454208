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

from raydbg import api_transport, config, ray_nodes, registry
from raydbg.api_errors import Unauthorized, Unreachable

ASK_TIMEOUT_S = 5.0


class DialRefused(Unreachable):
    """The gateway will not dial this node's agent (a 502 when it answers on); the message says why, in one line."""


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


def agent_peer(ip: str, port: int, token: str, node_id: str) -> api_transport.Peer:
    """A node agent as the gateway calls it: its errors name the node and say what is true from there."""
    return api_transport.Peer(f"[{ip}]:{port}" if ":" in ip else f"{ip}:{port}", token,
                              name=f"node {node_id[:12]}'s raydbg agent", down_hint="",
                              token_hint="it holds another token than the gateway's (an agent of an earlier cluster?)",
                              json_hint="is a raydbg agent listening there?")


def relay_url(ip: str, port: int, sid: str) -> str:
    return agent_peer(ip, port, "", "").url(f"/api/v1/sessions/{sid}/dap")


def ask_agent(node_id: str) -> dict[str, Any] | None:
    """The agent actor's own record (blocking Ray call); None if there is none."""
    import ray

    try:
        handle = ray.get_actor(config.agent_name(node_id), namespace=config.NAMESPACE)
        info: Any = ray.get(handle.info.remote(), timeout=ASK_TIMEOUT_S)
    except Exception:
        return None
    return info if isinstance(info, dict) else None


def resolve(node_id: str, token: str, nodes: list[dict[str, Any]] | None = None) -> api_transport.Peer:
    """`node_id`'s agent, at the address Ray gives (the rule above), or DialRefused (blocking)."""
    ip, port = check(node_id, ray_nodes.nodes() if nodes is None else nodes, ask_agent(node_id))
    return agent_peer(ip, port, token, node_id)


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

    async def one(http: aiohttp.ClientSession, node_id: str) -> None:
        try:
            peer = await asyncio.to_thread(resolve, node_id, token, nodes)
            answers.append(await api_transport.acall(peer, http, "GET", path, params=params, timeout=timeout_s))
        except Exception as exc:  # one agent's failure is its line, never the whole fan-out's
            errors.append({"node_id": node_id, "error": str(exc) or type(exc).__name__})

    async with aiohttp.ClientSession() as http:
        await asyncio.gather(*(one(http, str(a.get("node_id"))) for a in others))
    return answers, errors


async def post_agent(node_id: str, path: str, body: Any, *, token: str, timeout_s: float) -> Any:
    """POST `body` (JSON) to `node_id`'s agent: its JSON answer. Its refusal is the typed error
    of its status with its own line (api_errors); DialRefused when that agent may not be
    dialled, Unreachable or Timeout when it cannot be reached."""
    peer = await asyncio.to_thread(resolve, node_id, token)
    async with aiohttp.ClientSession() as http:
        try:
            return await api_transport.acall(peer, http, "POST", path, body, timeout=timeout_s)
        except Unauthorized as exc:  # the agent refused the gateway, not the client: never a 401 to the client
            raise Unreachable(str(exc)) from None
