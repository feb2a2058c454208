"""The DAP relay: an authenticated WebSocket on one side, the worker's loopback debugpy on the other."""

from __future__ import annotations

import asyncio
import logging
from typing import Any

import aiohttp
from aiohttp import web

from raydbg.agent.dap_rewrite import DapReframer, DapStreamError

log = logging.getLogger("raydbg.agent")

CLOSE_BAD_TOKEN = 4401
CLOSE_UNKNOWN_SESSION = 4404
CLOSE_BUSY = 4409
CLOSE_UNREACHABLE = 4502


async def to_debugpy(ws: web.WebSocketResponse, port: int) -> None:
    """Pipe a client WebSocket to debugpy at 127.0.0.1:port.

    debugpy is only dialled once a whole DAP message has arrived: a bare connect+close
    wedges debugpy's adapter for good (FACTS.md), so nothing but a real client reaches it.
    """
    reframer = DapReframer()
    writer: asyncio.StreamWriter | None = None
    pump: asyncio.Task[None] | None = None
    try:
        async for msg in ws:
            if msg.type != aiohttp.WSMsgType.BINARY:
                if msg.type == aiohttp.WSMsgType.TEXT:
                    data = msg.data.encode()
                else:
                    break
            else:
                data = msg.data
            try:
                frames = reframer.feed(data)
            except DapStreamError as exc:
                log.warning("raydbg relay: %s; closing", exc)
                await ws.close(code=aiohttp.WSCloseCode.UNSUPPORTED_DATA, message=str(exc).encode())
                break
            if frames and writer is None:
                try:
                    reader, writer = await asyncio.open_connection("127.0.0.1", port)
                except OSError as exc:
                    await ws.close(code=CLOSE_UNREACHABLE, message=f"debuggee unreachable: {exc}".encode())
                    break
                pump = asyncio.ensure_future(_tcp_to_ws(reader, ws))
            if writer is not None:
                for frame in frames:
                    writer.write(frame)
                await writer.drain()
    finally:
        if writer is not None:
            writer.close()
        if pump is not None:
            try:
                await asyncio.wait_for(pump, 2)
            except (asyncio.TimeoutError, Exception):
                pump.cancel()
        if not ws.closed:
            await ws.close()


async def _tcp_to_ws(reader: asyncio.StreamReader, ws: web.WebSocketResponse) -> None:
    try:
        while True:
            data = await reader.read(65536)
            if not data:
                break
            await ws.send_bytes(data)
    except (ConnectionError, RuntimeError):
        pass
    finally:
        if not ws.closed:
            await ws.close()


async def to_agent(ws: web.WebSocketResponse, url: str, token: str) -> None:
    """Pipe a client WebSocket to another node's agent (same path, same token)."""
    async with aiohttp.ClientSession() as http:
        try:
            peer = await http.ws_connect(url, headers={"Authorization": f"Bearer {token}"}, max_msg_size=0)
        except (aiohttp.ClientError, OSError) as exc:
            await ws.close(code=CLOSE_UNREACHABLE, message=f"node agent unreachable: {exc}".encode())
            return
        await asyncio.gather(_ws_pipe(ws, peer), _ws_pipe(peer, ws))


async def _ws_pipe(src: Any, dst: Any) -> None:
    try:
        async for msg in src:
            if msg.type == aiohttp.WSMsgType.BINARY:
                await dst.send_bytes(msg.data)
            elif msg.type == aiohttp.WSMsgType.TEXT:
                await dst.send_str(msg.data)
            else:
                break
    except (ConnectionError, RuntimeError):
        pass
    finally:
        if not dst.closed:
            await dst.close()
