"""The gateway client against a real local HTTP server: JSON in and out, one-line errors
(discovery: test_discovery_trust.py)."""

from __future__ import annotations

import socket
from typing import Any

import pytest
from aiohttp import web

from raydbg.client import Gateway, GatewayError


async def _serve(routes: list[web.RouteDef]) -> tuple[web.AppRunner, str]:
    app = web.Application()
    app.add_routes(routes)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    return runner, f"127.0.0.1:{port}"


async def test_json_body_token_and_errors() -> None:
    seen: dict[str, Any] = {}

    async def echo(request: web.Request) -> web.Response:
        seen["auth"] = request.headers.get("Authorization")
        seen["body"] = await request.json()
        return web.json_response({"got": seen["body"], "method": request.method})

    async def refuse(request: web.Request) -> web.Response:
        return web.json_response({"error": "nope"}, status=401)

    async def missing(request: web.Request) -> web.Response:
        return web.json_response({"error": "no breakpoint b1"}, status=404)

    async def text(request: web.Request) -> web.Response:
        return web.Response(text="<html>hi</html>")

    runner, address = await _serve([web.put("/echo", echo), web.get("/refuse", refuse),
                                    web.delete("/missing", missing), web.get("/text", text)])
    try:
        gw = Gateway(address, "tok")
        assert await gw.put("/echo", {"a": [1, 2]}) == {"got": {"a": [1, 2]}, "method": "PUT"}
        assert seen == {"auth": "Bearer tok", "body": {"a": [1, 2]}}
        with pytest.raises(GatewayError, match="refused the token"):
            await gw.get("/refuse")
        with pytest.raises(GatewayError, match="^no breakpoint b1$"):
            await gw.delete("/missing")
        with pytest.raises(GatewayError, match="not JSON"):
            await gw.get("/text")
    finally:
        await runner.cleanup()


async def test_unreachable_and_bad_address_are_one_line_errors() -> None:
    with socket.socket() as s:  # a port nobody listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    with pytest.raises(GatewayError, match="cannot connect to the raydbg gateway"):
        await Gateway(f"127.0.0.1:{port}", "t").get("/api/v1/status")
    with pytest.raises(GatewayError, match="is not HOST:PORT"):
        await Gateway("nowhere", "t").get("/api/v1/status")
