"""`raydbg forward`: a local 127.0.0.1 port that any DAP client attaches to, relayed to a session."""

from __future__ import annotations

import asyncio
import logging

import aiohttp

from raydbg.client import Gateway, GatewayError

log = logging.getLogger("raydbg")

# How long a client is held while its session is still "starting" (listed, not listening yet).
ATTACHABLE_WAIT_S = 5.0
ATTACHABLE_POLL_S = 0.1


async def _pipe_in(reader: asyncio.StreamReader, ws: aiohttp.ClientWebSocketResponse) -> None:
    try:
        while data := await reader.read(65536):
            await ws.send_bytes(data)
    except (ConnectionError, RuntimeError):
        pass
    finally:
        await ws.close()


async def _pipe_out(ws: aiohttp.ClientWebSocketResponse, writer: asyncio.StreamWriter) -> None:
    try:
        async for msg in ws:
            if msg.type == aiohttp.WSMsgType.BINARY:
                writer.write(msg.data)
                await writer.drain()
            elif msg.type != aiohttp.WSMsgType.TEXT:
                break
    except (ConnectionError, RuntimeError):
        pass
    finally:
        writer.close()


class Forwarder:
    """Accepts DAP clients on 127.0.0.1:port and relays each through the gateway."""

    def __init__(self, gateway: Gateway, session_id: str, port: int = 0) -> None:
        self.gateway = gateway
        self.session_id = session_id
        self.port = port
        self.server: asyncio.Server | None = None
        self.connections = 0

    async def start(self) -> int:
        await self.gateway.session(self.session_id)  # unknown id / bad token: fail before listening
        try:
            self.server = await asyncio.start_server(self._handle, "127.0.0.1", self.port)
        except OSError as exc:
            raise GatewayError(f"cannot listen on 127.0.0.1:{self.port}: {exc.strerror}") from None
        self.port = self.server.sockets[0].getsockname()[1]
        return self.port

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        async with aiohttp.ClientSession() as http:
            try:
                await self._until_attachable()
                ws = await self.gateway.open_dap(http, self.session_id)
            except GatewayError as exc:
                log.error("raydbg forward: %s", exc)
                writer.close()
                return
            try:
                await asyncio.gather(_pipe_in(reader, ws), _pipe_out(ws, writer))
            except asyncio.CancelledError:
                # The forwarder is closing; end quietly (asyncio logs a cancelled handler).
                writer.close()

    async def _until_attachable(self) -> None:
        """Hold the client (bounded) while the session is listed but not attachable yet;
        the gateway answers the relay then (or says why not)."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + ATTACHABLE_WAIT_S
        while loop.time() < deadline:
            rec = await self.gateway.session(self.session_id)
            if rec.get("attachable", True):
                return
            await asyncio.sleep(ATTACHABLE_POLL_S)

    async def close(self) -> None:
        if self.server is not None:
            self.server.close()
            await self.server.wait_closed()
