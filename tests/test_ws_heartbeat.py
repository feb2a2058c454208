"""Client-side heartbeats: a gateway that goes silent ends the DAP client and `raydbg forward`.

A real aiohttp server on loopback plays a gateway whose relay stops answering (no pongs,
no reads) once the WebSocket is open: what a dropped network path looks like to a client.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator

import pytest
from aiohttp import web

import raydbg.dap.transport
from raydbg.client import Gateway
from raydbg.dap import DapConnectionLost, open_websocket
from raydbg.forward import Forwarder

HEARTBEAT_S = 0.5


@pytest.fixture
async def silent_gateway() -> AsyncIterator[str]:
    hold = asyncio.Event()

    async def session(request: web.Request) -> web.Response:
        return web.json_response({"id": request.match_info["id"]})

    async def dap(request: web.Request) -> web.WebSocketResponse:
        ws = web.WebSocketResponse(autoping=False)  # never answers a ping
        await ws.prepare(request)
        await hold.wait()  # and never reads
        return ws

    app = web.Application()
    app.router.add_get("/api/v1/sessions/{id}", session)
    app.router.add_get("/api/v1/sessions/{id}/dap", dap)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    yield f"127.0.0.1:{runner.addresses[0][1]}"
    hold.set()
    await runner.cleanup()


async def test_the_dap_client_notices_a_silent_gateway(silent_gateway: str) -> None:
    reader, writer = await open_websocket(f"http://{silent_gateway}/api/v1/sessions/abc/dap", "t",
                                          heartbeat=HEARTBEAT_S)
    start = time.monotonic()
    with pytest.raises((DapConnectionLost, ConnectionError, asyncio.IncompleteReadError)):
        data = await asyncio.wait_for(reader.read(1), 10)
        assert data == b""  # EOF counts as noticed too
        raise ConnectionError("eof")
    assert time.monotonic() - start < 1.5 * HEARTBEAT_S + 2
    writer.close()


async def test_forward_drops_its_local_client_when_the_gateway_goes_silent(
        silent_gateway: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(raydbg.dap.transport, "WS_HEARTBEAT_S", HEARTBEAT_S)  # read by Gateway.open_dap
    fwd = Forwarder(Gateway(silent_gateway, "t"), "abc")
    port = await fwd.start()
    try:
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.write(b"Content-Length: 2\r\n\r\n{}")
        await writer.drain()
        start = time.monotonic()
        assert await asyncio.wait_for(reader.read(), 10) == b""  # the forwarder hung up
        assert time.monotonic() - start < 1.5 * HEARTBEAT_S + 2
        writer.close()
    finally:
        await fwd.close()
