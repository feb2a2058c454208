"""HTTP routes for gangs: continue a session or a pause group, progress per node and merged, pause groups.

Registered by `register(server, app)` from AgentServer.app(); on the gateway it also starts
the hang detector (raydbg/gang/hang_service.py) with the app.

  POST /api/v1/sessions/{id}/continue   resume one paused session (waiting or attached)
  POST /api/v1/groups/{group}/continue  resume every rank of a pause-all group
  GET  /api/v1/groups                   pause groups among the listed sessions
  GET  /api/v1/progress/local           this node's progress beats
  GET  /api/v1/progress                 every node's (gateway only)
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

import aiohttp
from aiohttp import web

from raydbg import progress_records as progress
from raydbg import registry
from raydbg.gang import collect, pause

log = logging.getLogger("raydbg.agent")

AGENT_TIMEOUT_S = 5.0


async def _blocking(fn: Any, *args: Any) -> Any:
    return await asyncio.get_running_loop().run_in_executor(None, fn, *args)


def _ray_nodes() -> list[dict[str, Any]]:
    import ray

    return list(ray.nodes())


async def merged_progress(server: Any) -> tuple[list[dict[str, Any]], list[dict[str, str]]]:
    """Beats of every node: this one read directly, the others through their agents."""
    agents = await _blocking(registry.agents)
    out: list[dict[str, Any]] = list(await _blocking(progress.read_all))
    errors: list[dict[str, str]] = []
    headers = {"Authorization": f"Bearer {server.token}"}
    timeout = aiohttp.ClientTimeout(total=AGENT_TIMEOUT_S)

    async def one(http: aiohttp.ClientSession, agent: dict[str, Any], nodes: list[dict[str, Any]]) -> None:
        try:
            # The relay's rule: Ray's node table and the agent actor, not the KV record alone.
            base = await _blocking(collect.agent_base_url, str(agent.get("node_id")), nodes)
            async with http.get(base + "/api/v1/progress/local", headers=headers) as resp:
                resp.raise_for_status()
                out.extend(await resp.json())
        except Exception as exc:
            errors.append({"node_id": str(agent.get("node_id")), "error": str(exc) or type(exc).__name__})

    others = [a for a in agents if a.get("node_id") != server.node_id and a.get("port")]
    if others:
        nodes = await _blocking(_ray_nodes)
        async with aiohttp.ClientSession(timeout=timeout) as http:
            await asyncio.gather(*(one(http, a, nodes) for a in others))
    return out, errors


def register(server: Any, app: web.Application) -> None:
    async def continue_session(request: web.Request) -> web.Response:
        sid = request.match_info["id"]
        rec = await _blocking(registry.get, registry.SESSION + sid)
        if rec is None:
            return web.json_response({"error": f"no paused session {sid}"}, status=404)
        await _blocking(pause.request_session, sid)
        return web.json_response({"continued": [sid], "group": None})

    async def continue_group(request: web.Request) -> web.Response:
        gid = request.match_info["group"]
        sessions = await _blocking(registry.sessions)
        kind, ids = pause.resolve(gid, sessions)
        if kind != "group":
            return web.json_response({"error": f"no paused session in group {gid}"}, status=404)
        await _blocking(pause.request_group, gid)
        return web.json_response({"continued": ids, "group": gid})

    async def groups(request: web.Request) -> web.Response:
        return web.json_response(pause.groups(await _blocking(registry.sessions)))

    async def progress_local(request: web.Request) -> web.Response:
        return web.json_response(await _blocking(progress.read_all))

    async def progress_all(request: web.Request) -> web.Response:
        if not server.is_head:
            return web.json_response({"error": "not the gateway"}, status=404)
        beats, errors = await merged_progress(server)
        return web.json_response({"progress": beats, "errors": errors})

    app.add_routes([
        web.post("/api/v1/sessions/{id}/continue", continue_session),
        web.post("/api/v1/groups/{group}/continue", continue_group),
        web.get("/api/v1/groups", groups),
        web.get("/api/v1/progress/local", progress_local),
        web.get("/api/v1/progress", progress_all),
    ])
    if server.is_head:
        from raydbg.gang import hang_service

        hang_service.attach(server, app)
