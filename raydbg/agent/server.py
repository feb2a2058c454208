"""The agent's aiohttp app: authenticated JSON API (gateway on the head) and the DAP relay.

The core routes are here; each feature adds its own through `Feature.register` (the
agent host lists the features: raydbg/agent_host/actor.py)."""

from __future__ import annotations

import asyncio
import logging
from collections import Counter
from collections.abc import Callable, Sequence
from typing import Any, Protocol

from aiohttp import web
from aiohttp.abc import AbstractAccessLogger

from raydbg import _ray_internals, api_errors, auth, config, dial, registry, telemetry, validate
from raydbg.agent import feed, relay
from raydbg.api_errors import BadRequest, Conflict, NotFound, Unauthorized, Unavailable
from raydbg.telemetry import prometheus
from raydbg.version import __version__

log = logging.getLogger("raydbg.agent")

SSE_KEEPALIVE_S = 15.0
SSE_WRITE_TIMEOUT_S = 30.0
# How often a client held for a "starting" session (config.ATTACHABLE_WAIT_S) looks again.
ATTACHABLE_POLL_S = 0.05

# Fields of a session record that stay inside raydbg (where the worker's debugger listens).
PRIVATE_FIELDS = ("port", "socket")


RELAY = telemetry.counter("raydbg.relay.connections", "{connection}", "Relay and API connections")
ACTIVE = telemetry.up_down_counter("raydbg.relay.active", "{connection}", "Open DAP relays")


def public(rec: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in rec.items() if k not in PRIVATE_FIELDS}


async def json_body(request: web.Request, shape: str) -> Any:
    """The request's JSON body, parsed as records are (validate.parse: at most 1 MiB, no NaN or
    infinite numbers, bounded nesting): every JSON route reads its body here, and anything
    else is answered with a one-line 400 (BadRequest) naming the `shape` to send, never a 500."""
    try:
        return validate.parse(await request.read())
    except validate.Malformed as exc:
        raise BadRequest(f"send {shape} as JSON ({validate.escape(exc, 200)})") from None


def _history_state() -> dict[str, Any] | None:
    """The gateway's history writer's state (raydbg/history/writer.py), None where none runs."""
    from raydbg.history import writer

    current = writer.current()
    return current.state() if current is not None else None


class Feature(Protocol):
    """A feature's part of the agent (a module with this function will do)."""

    def register(self, agent: AgentServer, app: web.Application) -> None:
        """Add the feature's routes (and start-up/clean-up work) to `agent`'s app."""


class AgentServer:
    """One per node agent. `nodes_fn` lists cluster nodes (only needed on the gateway);
    `features` add their routes to the app."""

    def __init__(
        self,
        node_id: str,
        node_ip: str,
        token: str,
        is_head: bool,
        nodes_fn: Callable[[], list[dict[str, Any]]] | None = None,
        features: Sequence[Feature] = (),
    ) -> None:
        self.node_id = node_id
        self.node_ip = node_ip
        self.token = token
        self.is_head = is_head
        self.nodes_fn = nodes_fn
        self.refused: Counter[str] = Counter()
        self.relays = 0
        self._busy_pids: set[int] = set()
        self.features = tuple(features)
        self.feed = feed.SessionFeed(self._public_sessions)

    # --- plumbing -------------------------------------------------------------
    def refuse(self, request: web.Request, reason: str) -> None:
        self.refused[reason] += 1
        RELAY.add(1, outcome="refused", reason=reason)
        # Client-controlled text is escaped: a path with CR/LF or ANSI codes cannot forge log lines.
        log.warning("raydbg agent: refused %s %s from %s (%s)", validate.escape(request.method, 16),
                    validate.escape(request.path), validate.escape(request.remote, 64), reason)

    @web.middleware
    async def _auth(self, request: web.Request, handler: Callable[..., Any]) -> web.StreamResponse:
        request["raydbg_parsed"] = True
        presented = auth.bearer(request.headers.get("Authorization"))
        if not auth.check(presented, self.token):
            self.refuse(request, "no token" if presented is None else "bad token")
            raise Unauthorized("missing or wrong raydbg token")
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
        # The error map outermost: the token check's refusal is one of its errors too.
        app = web.Application(middlewares=[api_errors.middleware, self._auth])
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
        ])
        for feature in self.features:
            feature.register(self, app)
        return app

    # --- JSON API -------------------------------------------------------------
    async def status(self, request: web.Request) -> web.Response:
        import platform

        import debugpy
        import ray

        agents = await asyncio.to_thread(registry.agents)
        sessions = await asyncio.to_thread(registry.sessions)
        gateway = await asyncio.to_thread(registry.get, registry.GATEWAY)
        return web.json_response({
            "version": __version__,
            "ray_version": ray.__version__,
            "debugpy_version": debugpy.__version__,
            "python_version": platform.python_version(),
            # What the cluster's Ray lacks of what raydbg would use, one line each.
            "ray_missing": _ray_internals.missing_features(),
            "gateway": (gateway or {}).get("address"),
            "agents": [{**a, "metrics_url": prometheus.metrics_url(a)} for a in agents],
            "sessions": len(sessions),
            "refused": dict(self.refused),
            "relays": self.relays,
            "malformed_records": {**dict.fromkeys(validate.SCHEMAS, 0), **registry.malformed},
            "history": _history_state(),
        })

    async def sessions(self, request: web.Request) -> web.Response:
        recs = await asyncio.to_thread(registry.sessions)
        return web.json_response([public(r) for r in recs])

    async def session(self, request: web.Request) -> web.Response:
        sid = request.match_info["id"]
        rec = await asyncio.to_thread(registry.get, registry.SESSION + sid) if validate.is_id(sid) else None
        if rec is None:
            raise NotFound(f"no paused session {validate.escape(sid, 64)}")
        return web.json_response(public(rec))

    async def nodes(self, request: web.Request) -> web.Response:
        if self.nodes_fn is None:
            raise NotFound("not the gateway")
        return web.json_response(await asyncio.to_thread(self.nodes_fn))

    async def events(self, request: web.Request) -> web.Response:
        try:
            limit = max(1, min(1000, int(request.query.get("limit", "100"))))
        except ValueError:
            raise BadRequest("limit must be an integer") from None
        return web.json_response(await asyncio.to_thread(registry.events, limit))

    async def agents(self, request: web.Request) -> web.Response:
        return web.json_response(await asyncio.to_thread(registry.agents))

    async def _public_sessions(self) -> list[dict[str, Any]]:
        return [public(r) for r in await asyncio.to_thread(registry.sessions)]

    async def stream(self, request: web.Request) -> web.StreamResponse:
        """Server-Sent Events: the session list whenever it changes (one poller for all clients)."""
        try:
            self.feed.join()
        except feed.TooManyClients as exc:
            raise Unavailable(f"{exc}; try again later") from None
        try:
            resp = web.StreamResponse(headers={"Content-Type": "text/event-stream", "Cache-Control": "no-cache"})
            await resp.prepare(request)
            seen = -1
            while True:
                # Unchanged lists are sent again every KEEPALIVE_S: clients see the stream is alive.
                seen, body = await self.feed.next(seen, SSE_KEEPALIVE_S)
                if body is None:
                    continue  # the first read has not answered yet
                # A client that stops reading is dropped, not waited for.
                await asyncio.wait_for(resp.write(f"event: sessions\ndata: {body}\n\n".encode()),
                                       SSE_WRITE_TIMEOUT_S)
        except (asyncio.TimeoutError, ConnectionError):
            return resp
        finally:
            self.feed.leave()

    # --- DAP relay ------------------------------------------------------------
    def _websocket(self) -> web.WebSocketResponse:
        # Bounded messages; a client that stops answering pings is dropped and its session freed.
        return web.WebSocketResponse(max_msg_size=relay.MAX_MESSAGE, heartbeat=relay.heartbeat_s())

    def _accepted(self) -> None:
        self.relays += 1
        RELAY.add(1, outcome="accepted", reason="dap")
        ACTIVE.add(1)

    async def dap(self, request: web.Request) -> web.StreamResponse:
        sid = request.match_info["id"]
        rec = await asyncio.to_thread(registry.get, registry.SESSION + sid) if validate.is_id(sid) else None
        if rec is None:
            raise NotFound(f"no paused session {validate.escape(sid, 64)}")
        if rec["node_id"] != self.node_id:
            if not self.is_head:  # only the gateway relays on; a node agent serves its own node
                raise NotFound(f"session {sid} is not on this node")
            return await self._relay_remote(request, rec, sid)
        # Listed a moment before its debugger listens ("starting"): the client waits, bounded.
        loop = asyncio.get_running_loop()
        deadline = loop.time() + config.ATTACHABLE_WAIT_S
        while not (rec.get("socket") or rec.get("port")):
            if loop.time() >= deadline:
                raise Conflict(f"session {sid} is not attachable yet")
            await asyncio.sleep(ATTACHABLE_POLL_S)
            rec = await asyncio.to_thread(registry.get, registry.SESSION + sid)
            if rec is None:
                raise NotFound(f"no paused session {sid}")
        pid = int(rec["pid"])
        # Checked and claimed with no await in between: of clients racing here, one wins.
        if pid in self._busy_pids:
            raise Conflict(f"a client is already attached to worker {pid}")
        self._busy_pids.add(pid)
        try:
            ws = self._websocket()
            await ws.prepare(request)
            self._accepted()
            try:
                return await self._relay(ws, rec)
            finally:
                ACTIVE.add(-1)
        finally:
            self._busy_pids.discard(pid)

    async def _relay_remote(self, request: web.Request, rec: dict[str, Any], sid: str) -> web.StreamResponse:
        """Relay to the agent of the session's node, at the address Ray gives (raydbg.dial)."""
        try:
            agent = await asyncio.to_thread(dial.resolve, rec["node_id"], self.token)
        except dial.DialRefused as exc:
            self.refuse(request, "dial")
            log.warning("raydbg agent: not relaying session %s: %s", sid, exc)
            raise exc.within(f"not relaying session {sid}") from None
        try:
            http, peer = await relay.open_agent(agent, sid)
        except api_errors.ApiError as exc:
            raise exc.within(f"session {sid}") from None
        ws = self._websocket()
        try:
            await ws.prepare(request)
        except BaseException:
            await peer.close()
            await http.close()
            raise
        self._accepted()
        try:
            await relay.pipe_agent(ws, http, peer)
        finally:
            ACTIVE.add(-1)
        return ws

    async def _relay(self, ws: web.WebSocketResponse, rec: dict[str, Any]) -> web.WebSocketResponse:
        """Relay to the session's worker on this node."""
        await relay.to_debugpy(ws, relay.DebuggeeAddress.of(rec), rec.get("thread_name") or None)
        return ws
