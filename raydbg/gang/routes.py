"""HTTP routes for stacks: `GET /api/v1/node/stacks` on every agent, `GET /api/v1/stacks` on the gateway.

  /api/v1/node/stacks?pids=1,2&job=ID&run=NAME&native=0|1&pyspy=0|1   this node's WorkerStacks
  /api/v1/stacks?job=ID&run=NAME&native=0|1&pyspy=0|1                    the whole cluster, grouped
"""

from __future__ import annotations

from typing import Any

from aiohttp import web

from raydbg.gang import collect, node


def _flag(request: web.Request, name: str, default: bool) -> bool:
    value = request.query.get(name)
    return default if value is None else value not in ("0", "false", "no", "")


class BadRequest(ValueError):
    pass


def _pids(text: str | None) -> set[int] | None:
    if text is None:
        return None
    try:
        return {int(p) for p in text.split(",") if p.strip()}
    except ValueError:
        raise BadRequest("pids must be comma-separated integers") from None


def routes(server: Any) -> list[web.RouteDef]:
    """The routes for `server` (an AgentServer); the cluster-wide one only on the gateway."""

    async def node_stacks(request: web.Request) -> web.Response:
        try:
            pids = _pids(request.query.get("pids"))
        except BadRequest as exc:
            return web.json_response({"error": str(exc)}, status=400)
        workers = await node.node_stacks(
            server.node_id, server.node_ip, pids=pids, job=request.query.get("job") or None,
            run=request.query.get("run") or None,
            native=_flag(request, "native", False), use_pyspy=_flag(request, "pyspy", True),
            blocking=server._blocking)
        return web.json_response({"node_id": server.node_id, "workers": workers})

    async def cluster_stacks(request: web.Request) -> web.Response:
        answer = await collect.cluster_stacks(
            job=request.query.get("job") or None, run=request.query.get("run") or None,
            native=_flag(request, "native", False), token=server.token, self_node_id=server.node_id,
            use_pyspy=_flag(request, "pyspy", True))
        return web.json_response(answer)

    out = [web.get("/api/v1/node/stacks", node_stacks)]
    if server.is_head:
        out.append(web.get("/api/v1/stacks", cluster_stacks))
    return out
