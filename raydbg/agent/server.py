"""The agent's aiohttp app: authenticated JSON API (gateway on the head) and the DAP relay."""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections import Counter
from collections.abc import Callable
from functools import partial
from typing import Any

from aiohttp import web
from aiohttp.abc import AbstractAccessLogger

import raydbg
from raydbg import auth, registry, telemetry
from raydbg.agent import relay
from raydbg.telemetry import prometheus

log = logging.getLogger("raydbg.agent")

# Fields of a session record that stay inside raydbg (the loopback debugpy port).
PRIVATE_FIELDS = ("port",)


RELAY = telemetry.counter("raydbg.relay.connections", "{connection}", "Relay and API connections")
ACTIVE = telemetry.up_down_counter("raydbg.relay.active", "{connection}", "Open DAP relays")


def public(rec: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in rec.items() if k not in PRIVATE_FIELDS}


class AgentServer:
    """One per node agent. `nodes_fn` lists cluster nodes (only needed on the gateway)."""

    def __init__(
        self,
        node_id: str,
        node_ip: str,
        token: str,
        is_head: bool,
        nodes_fn: Callable[[], list[dict[str, Any]]] | None = None,
    ) -> None:
        self.node_id = node_id
        self.node_ip = node_ip
        self.token = token
        self.is_head = is_head
        self.nodes_fn = nodes_fn
        self.refused: Counter[str] = Counter()
        self.relays = 0
        self._busy_pids: set[int] = set()
        self.extra_routes: list[web.RouteDef] = []

    # --- plumbing -------------------------------------------------------------
    async def _blocking(self, fn: Callable[..., Any], *args: Any) -> Any:
        return await asyncio.get_running_loop().run_in_executor(None, partial(fn, *args))

    def refuse(self, request: web.Request, reason: str) -> None:
        self.refused[reason] += 1
        RELAY.add(1, outcome="refused", reason=reason)
        log.warning("raydbg agent: refused %s %s from %s (%s)", request.method, request.path, request.remote, reason)

    @web.middleware
    async def _auth(self, request: web.Request, handler: Callable[..., Any]) -> web.StreamResponse:
        request["raydbg_parsed"] = True
        presented = auth.bearer(request.headers.get("Authorization"))
        if not auth.check(presented, self.token):
            self.refuse(request, "no token" if presented is None else "bad token")
            return web.json_response({"error": "missing or wrong raydbg token"}, status=401)
        return await handler(request)

    def access_logger(self) -> type[AbstractAccessLogger]:
        """aiohttp answers bytes that are not HTTP with a 400 before any handler: count those here."""
        server = self

        class RefusalCounter(AbstractAccessLogger):
            def log(self, request: Any, response: Any, time: float) -> None:
                if response.status == 400 and not request.get("raydbg_parsed"):
                    server.refused["malformed"] += 1
                    RELAY.add(1, outcome="refused", reason="malformed")
                    log.warning("raydbg agent: refused malformed request from %s", request.remote)

            @property
            def enabled(self) -> bool:
                return True

        return RefusalCounter

    def app(self) -> web.Application:
        app = web.Application(middlewares=[self._auth])
        app.add_routes([
            web.get("/api/v1/status", self.status),
            web.get("/api/v1/sessions", self.sessions),
            web.get("/api/v1/sessions/{id}", self.session),
            web.get("/api/v1/sessions/{id}/dap", self.dap),
            web.get("/api/v1/nodes", self.nodes),
            web.get("/api/v1/events", self.events),
            web.get("/api/v1/agents", self.agents),
            web.get("/api/v1/stream", self.stream),
            web.get("/metrics", prometheus.metrics_handler),
            *self.extra_routes,
        ])
        from raydbg.gang import train_api

        train_api.register(self, app)  # continue, pause groups, progress; the gateway's hang detector
        return app

    # --- JSON API -------------------------------------------------------------
    async def status(self, request: web.Request) -> web.Response:
        import debugpy
        import ray

        agents = await self._blocking(registry.agents)
        sessions = await self._blocking(registry.sessions)
        gateway = await self._blocking(registry.get, registry.GATEWAY)
        return web.json_response({
            "version": raydbg.__version__,
            "ray_version": ray.__version__,
            "debugpy_version": debugpy.__version__,
            "gateway": (gateway or {}).get("address"),
            "agents": agents,
            "sessions": len(sessions),
            "refused": dict(self.refused),
            "relays": self.relays,
        })

    async def sessions(self, request: web.Request) -> web.Response:
        recs = await self._blocking(registry.sessions)
        return web.json_response([public(r) for r in recs])

    async def session(self, request: web.Request) -> web.Response:
        rec = await self._blocking(registry.get, registry.SESSION + request.match_info["id"])
        if rec is None:
            return web.json_response({"error": f"no paused session {request.match_info['id']}"}, status=404)
        return web.json_response(public(rec))

    async def nodes(self, request: web.Request) -> web.Response:
        if self.nodes_fn is None:
            return web.json_response({"error": "not the gateway"}, status=404)
        return web.json_response(await self._blocking(self.nodes_fn))

    async def events(self, request: web.Request) -> web.Response:
        try:
            limit = max(1, min(1000, int(request.query.get("limit", "100"))))
        except ValueError:
            return web.json_response({"error": "limit must be an integer"}, status=400)
        return web.json_response(await self._blocking(registry.events, limit))

    async def agents(self, request: web.Request) -> web.Response:
        return web.json_response(await self._blocking(registry.agents))

    async def stream(self, request: web.Request) -> web.StreamResponse:
        """Server-Sent Events: the session list whenever it changes."""
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream", "Cache-Control": "no-cache"})
        await resp.prepare(request)
        last, last_sent = None, 0.0
        while True:
            recs = [public(r) for r in await self._blocking(registry.sessions)]
            body = json.dumps(recs)
            if body != last or time.monotonic() - last_sent > 15:
                await resp.write(f"event: sessions\ndata: {body}\n\n".encode())
                last, last_sent = body, time.monotonic()
            await asyncio.sleep(0.25)

    # --- DAP relay ------------------------------------------------------------
    async def dap(self, request: web.Request) -> web.StreamResponse:
        sid = request.match_info["id"]
        rec = await self._blocking(registry.get, registry.SESSION + sid)
        if rec is None:
            return web.json_response({"error": f"no paused session {sid}"}, status=404)
        mine = rec.get("node_id") == self.node_id
        pid = int(rec.get("pid", 0))
        if mine and not rec.get("port"):
            return web.json_response({"error": f"session {sid} is not attachable yet"}, status=409)
        if mine and pid in self._busy_pids:
            return web.json_response({"error": f"a client is already attached to worker {pid}"}, status=409)
        ws = web.WebSocketResponse(max_msg_size=0)
        await ws.prepare(request)
        self.relays += 1
        RELAY.add(1, outcome="accepted", reason="dap")
        ACTIVE.add(1)
        try:
            return await self._relay(ws, rec, sid, mine, pid)
        finally:
            ACTIVE.add(-1)

    async def _relay(self, ws: web.WebSocketResponse, rec: dict[str, Any], sid: str, mine: bool,
                     pid: int) -> web.WebSocketResponse:
        if not mine:
            agent = await self._blocking(registry.get, registry.AGENT + str(rec.get("node_id")))
            if agent is None:
                await ws.close(code=relay.CLOSE_UNREACHABLE, message=b"no agent on the session's node")
                return ws
            url = f"http://{agent['node_ip']}:{agent['port']}/api/v1/sessions/{sid}/dap"
            await relay.to_agent(ws, url, self.token)
            return ws
        self._busy_pids.add(pid)
        try:
            await relay.to_debugpy(ws, int(rec["port"]))
        finally:
            self._busy_pids.discard(pid)
        return ws
