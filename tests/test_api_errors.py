"""The one error map of raydbg's HTTP API, both ways over a real aiohttp server: a route's typed
error -> the middleware's status and one-line body -> the client's same typed error (the
blocking face the CLI uses, the asyncio face the gateway uses, the WebSocket handshake)."""

from __future__ import annotations

import asyncio
import json
import socket
import urllib.request
from collections.abc import AsyncIterator
from typing import Any

import aiohttp
import pytest
from aiohttp import web

from raydbg import api_errors, api_transport, dial
from raydbg.agent.server import AgentServer
from raydbg.api_errors import (
    AgentsStarting,
    ApiError,
    BadRequest,
    Conflict,
    Forbidden,
    NotFound,
    NotJson,
    Timeout,
    Unauthorized,
    Unavailable,
    Unreachable,
)
from raydbg.client import Gateway, GatewayError

TYPES: list[tuple[type[ApiError], int]] = [
    (BadRequest, 400), (Unauthorized, 401), (Forbidden, 403), (NotFound, 404), (Conflict, 409),
    (Unreachable, 502), (Unavailable, 503), (Timeout, 504), (AgentsStarting, 503),
]
TOKEN = "tok"


def _raising(request: web.Request) -> Any:
    name = request.match_info["kind"]
    if name == "crash":
        raise KeyError("gone")
    if name == "text":
        return web.Response(text="<html>proxy</html>", status=502)
    if name == "teapot":
        return web.json_response({"error": "short and stout"}, status=418)
    if name == "ok":
        return web.json_response({"fine": True})
    kind = getattr(api_errors, name)
    raise kind(f"{name} said\nwhy\x1b[31m")  # a second line and an ANSI code: sent as one escaped line


@pytest.fixture
async def server() -> AsyncIterator[str]:
    """A real server on a loopback port: the error middleware outermost, a token check, one
    route raising whatever it is asked to, and a WebSocket route that refuses the same way."""

    @web.middleware
    async def auth(request: web.Request, handler: Any) -> web.StreamResponse:
        if request.headers.get("Authorization") != f"Bearer {TOKEN}":
            raise Unauthorized("missing or wrong raydbg token")
        return await handler(request)

    async def plain(request: web.Request) -> Any:
        return _raising(request)

    async def ws(request: web.Request) -> web.StreamResponse:
        _raising(request)
        sock = web.WebSocketResponse()
        await sock.prepare(request)
        await sock.close()
        return sock

    app = web.Application(middlewares=[api_errors.middleware, auth])
    app.add_routes([web.get("/raise/{kind}", plain), web.post("/raise/{kind}", plain), web.get("/ws/{kind}", ws)])
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    try:
        yield f"127.0.0.1:{port}"
    finally:
        await runner.cleanup()


def _raw(address: str, path: str, token: str = TOKEN) -> tuple[int, bytes]:
    req = urllib.request.Request(f"http://{address}{path}", headers={"Authorization": f"Bearer {token}"})
    try:
        with urllib.request.urlopen(req, timeout=10) as resp:
            return resp.status, resp.read()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read()


@pytest.mark.parametrize(("kind", "status"), TYPES, ids=[k.__name__ for k, _ in TYPES])
async def test_the_middleware_answers_each_error_with_its_status_and_one_line(server: str, kind: type[ApiError],
                                                                               status: int) -> None:
    code, data = await asyncio.to_thread(_raw, server, f"/raise/{kind.__name__}")
    assert code == status == kind.status
    assert json.loads(data) == {"error": f"{kind.__name__} said\\x0awhy\\x1b[31m"}


async def test_the_token_check_and_a_crash_are_one_line_json_too(server: str) -> None:
    code, data = await asyncio.to_thread(_raw, server, "/raise/ok", "wrong")
    assert (code, json.loads(data)) == (401, {"error": "missing or wrong raydbg token"})
    code, data = await asyncio.to_thread(_raw, server, "/raise/crash")
    error = json.loads(data)["error"]
    assert code == 500 and error.startswith("raydbg agent error: KeyError: 'gone'") and "\n" not in error
    code, data = await asyncio.to_thread(_raw, server, "/no/such/route")
    assert code == 404 and data.startswith(b"404")  # aiohttp's own answer passes as it is


@pytest.mark.parametrize(("kind", "status"), TYPES, ids=[k.__name__ for k, _ in TYPES])
async def test_the_client_raises_the_same_type_on_both_faces(server: str, kind: type[ApiError], status: int) -> None:
    gw = Gateway(server, TOKEN)
    expected = Unavailable if kind is AgentsStarting else kind  # a status names the type: 503 is Unavailable
    line = f"{kind.__name__} said\\x0awhy\\x1b[31m"
    if kind is Unauthorized:  # the client's own line: what to do about the token
        line = f"the raydbg gateway at {server} refused the token: check RAYDBG_TOKEN / --token-file"
    with pytest.raises(expected) as blocking:  # in a thread: the server runs on this loop
        await asyncio.to_thread(gw.call, "GET", f"/raise/{kind.__name__}")
    assert type(blocking.value) is expected and str(blocking.value) == line and blocking.value.status == status
    with pytest.raises(expected) as threaded:
        await gw.post(f"/raise/{kind.__name__}", body={"a": 1})
    assert str(threaded.value) == line
    async with aiohttp.ClientSession() as http:
        with pytest.raises(expected) as async_face:
            await api_transport.acall(gw.peer, http, "GET", f"/raise/{kind.__name__}")
    assert type(async_face.value) is expected and str(async_face.value) == line
    assert isinstance(async_face.value, GatewayError)  # what the CLI prints as one line, exit 1


async def test_other_statuses_text_and_silence(server: str) -> None:
    gw = Gateway(server, TOKEN)
    with pytest.raises(ApiError, match="^short and stout$") as teapot:
        await gw.get("/raise/teapot")
    assert teapot.value.status == 418
    with pytest.raises(NotJson, match="answered 502 with something that is not JSON"):
        await gw.get("/raise/text")
    assert await gw.get("/raise/ok") == {"fine": True}
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    down = Gateway(f"127.0.0.1:{port}", TOKEN)
    with pytest.raises(Unreachable, match=f"cannot connect to the raydbg gateway at 127.0.0.1:{port}"):
        down.call("GET", "/")
    async with aiohttp.ClientSession() as http:
        with pytest.raises(Unreachable, match="cannot connect to the raydbg gateway"):
            await api_transport.acall(down.peer, http, "GET", "/")


async def test_a_silent_peer_is_a_timeout_on_both_faces() -> None:
    with socket.socket() as s:  # listens, never answers
        s.bind(("127.0.0.1", 0))
        s.listen()
        peer = api_transport.Peer(f"127.0.0.1:{s.getsockname()[1]}", TOKEN)
        with pytest.raises(Timeout, match="no answer within 0.3 s"):
            api_transport.call(peer, "GET", "/", timeout=0.3)
        async with aiohttp.ClientSession() as http:
            with pytest.raises(Timeout, match="no answer within 0.3 s"):
                await api_transport.acall(peer, http, "GET", "/", timeout=0.3)


async def test_a_refused_websocket_is_the_same_typed_error(server: str) -> None:
    gw = Gateway(server, TOKEN)
    async with aiohttp.ClientSession() as http:
        for kind in (NotFound, Conflict, Unavailable):
            with pytest.raises(kind):
                await api_transport.open_ws(gw.peer, http, f"/ws/{kind.__name__}", max_msg_size=1024, heartbeat=5)
        with pytest.raises(NotFound, match="^no paused session abc$"):  # the CLI's own lines (raydbg forward)
            await Gateway(server, TOKEN).open_dap(http, "abc")
        with pytest.raises(Unauthorized, match="refused the token"):
            await api_transport.open_ws(api_transport.Peer(server, "wrong"), http, "/ws/ok", max_msg_size=1024,
                                        heartbeat=5)
        ws = await api_transport.open_ws(gw.peer, http, "/ws/ok", max_msg_size=1024, heartbeat=5)
        await ws.close()


async def test_the_gateway_passes_a_node_agents_refusal_on_but_never_its_401(server: str,
                                                                             monkeypatch: pytest.MonkeyPatch) -> None:
    host, port = server.rsplit(":", 1)
    monkeypatch.setattr(dial, "resolve", lambda node_id, token, nodes=None: dial.agent_peer(host, int(port), token, node_id))
    with pytest.raises(NotFound, match="^NotFound said"):  # e.g. "no process N on this node": answered on as it is
        await dial.post_agent("n" * 56, "/raise/NotFound", {}, token=TOKEN, timeout_s=5)
    with pytest.raises(Unreachable, match=f"node nnnnnnnnnnnn's raydbg agent at {server} refused the token"):
        await dial.post_agent("n" * 56, "/raise/ok", {}, token="wrong", timeout_s=5)
    assert await dial.post_agent("n" * 56, "/raise/ok", {}, token=TOKEN, timeout_s=5) == {"fine": True}


async def test_the_agent_app_answers_through_the_map() -> None:
    """The real agent app: the token check and a route's NotFound come back as typed errors."""
    from aiohttp.test_utils import TestServer

    app = AgentServer("0" * 56, "127.0.0.1", TOKEN, is_head=False).app()
    async with TestServer(app, host="127.0.0.1") as srv:
        address = f"127.0.0.1:{srv.port}"
        with pytest.raises(Unauthorized):
            await Gateway(address, "wrong").nodes()
        with pytest.raises(NotFound, match="^not the gateway$"):
            await Gateway(address, TOKEN).nodes()
        with pytest.raises(BadRequest, match="^limit must be an integer$"):
            await Gateway(address, TOKEN).get("/api/v1/events?limit=x")


def test_within_keeps_the_type_and_from_status_names_it() -> None:
    err = Conflict("busy").within("session s1")
    assert type(err) is Conflict and str(err) == "session s1: busy"
    assert all(type(api_errors.from_status(k.status, "x")) is k for k, _ in TYPES if k is not AgentsStarting)
    assert api_errors.message_of({"error": "one line"}) == "one line" and api_errors.message_of([1]) is None
