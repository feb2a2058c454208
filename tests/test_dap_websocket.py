"""Tests of the DAP client over a real aiohttp WebSocket (chunked bytes, close codes)."""

from __future__ import annotations

import asyncio
import socket
from collections.abc import AsyncIterator, Awaitable, Callable

import aiohttp
import pytest
from aiohttp import web

from raydbg.dap import DapClient, DapConnectionLost, encode_message, open_websocket, read_message

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]
Serve = Callable[[Handler], Awaitable[str]]


@pytest.fixture
async def serve() -> AsyncIterator[Serve]:
    runners: list[web.AppRunner] = []

    async def start(handler: Handler) -> str:
        app = web.Application()
        app.router.add_get("/api/v1/sessions/{id}/dap", handler)
        runner = web.AppRunner(app)
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", 0)
        await site.start()
        runners.append(runner)
        port = runner.addresses[0][1]
        return f"ws://127.0.0.1:{port}/api/v1/sessions/abc/dap"

    yield start
    for runner in runners:
        await runner.cleanup()


async def dap_over_ws(request: web.Request) -> web.WebSocketResponse:
    """A tiny DAP peer: answers `threads`, chopping and merging frames across messages."""
    if request.headers.get("Authorization") != "Bearer s3cret":
        raise web.HTTPUnauthorized()
    ws = web.WebSocketResponse()
    await ws.prepare(request)
    inbound = asyncio.StreamReader()
    seq = 0

    async def pump() -> None:
        async for msg in ws:
            if msg.type == aiohttp.WSMsgType.BINARY:
                inbound.feed_data(msg.data)
        inbound.feed_eof()

    pump_task = asyncio.create_task(pump())
    while (req := await read_message(inbound)) is not None:
        seq += 1
        event = encode_message({"seq": seq, "type": "event", "event": "output", "body": {}})
        seq += 1
        reply = encode_message(
            {
                "seq": seq,
                "type": "response",
                "request_seq": req["seq"],
                "command": req["command"],
                "success": True,
                "body": {"threads": [{"id": req["seq"], "name": "é" * 300}]},
            }
        )
        data = event + reply
        for i in range(0, len(data), 7):  # 7-byte WebSocket messages: boundaries mean nothing
            await ws.send_bytes(data[i : i + 7])
    await pump_task
    return ws


async def test_requests_round_trip_over_chunked_websocket(serve: Serve) -> None:
    url = await serve(dap_over_ws)
    reader, writer = await open_websocket(url, "s3cret")
    client = DapClient(reader, writer, timeout=3)
    outputs: list[dict[str, object]] = []
    client.subscribe("output", outputs.append)
    results = await asyncio.gather(client.threads(), client.threads(), client.threads())
    assert sorted(r[0]["id"] for r in results) == [1, 2, 3]
    assert results[0][0]["name"] == "é" * 300
    assert len(outputs) == 3
    await client.close()


async def test_wrong_token_is_one_clear_line(serve: Serve) -> None:
    url = await serve(dap_over_ws)
    with pytest.raises(DapConnectionLost, match=r"refused the token \(HTTP 401\)"):
        await open_websocket(url, "wrong")


@pytest.mark.parametrize(
    ("code", "words"),
    [(4404, "no such debug session"), (4502, "cannot be reached"), (4401, "refused the token")],
)
async def test_relay_close_codes_fail_pending_with_their_meaning(
    serve: Serve, code: int, words: str
) -> None:
    async def refuse(request: web.Request) -> web.WebSocketResponse:
        ws = web.WebSocketResponse()
        await ws.prepare(request)
        await ws.receive()  # the first request arrives, then the relay gives up
        await ws.close(code=code, message=b"bye")
        return ws

    url = await serve(refuse)
    reader, writer = await open_websocket(url, "s3cret")
    client = DapClient(reader, writer, timeout=3)
    with pytest.raises(DapConnectionLost, match=words):
        await client.threads()
    with pytest.raises(DapConnectionLost, match=words):
        await client.threads()
    await client.close()


async def test_unreachable_relay_is_connection_lost() -> None:
    with socket.socket() as sock:  # a port that was free a moment ago: nothing listens
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    with pytest.raises(DapConnectionLost, match="cannot reach the DAP relay"):
        await open_websocket(f"ws://127.0.0.1:{port}/api/v1/sessions/x/dap", "t", timeout=2)
