"""Byte transports for the DAP client: TCP, an aiohttp WebSocket, and an in-memory pipe."""

from __future__ import annotations

import asyncio
import contextlib
from typing import Any

import aiohttp

from raydbg.dap.errors import DapConnectionLost
from raydbg.dap.framing import MAX_BODY_BYTES

# The biggest WebSocket message taken: one whole DAP message (header and body).
MAX_WS_MESSAGE = 4096 + MAX_BODY_BYTES
# Ping interval: a gateway that stops answering is noticed within 1.5x this, not hours later.
WS_HEARTBEAT_S = 10.0

# Close codes of the raydbg DAP relay (docs/architecture.md, "DAP relay").
RELAY_CLOSE_REASONS = {
    4401: "the gateway refused the token (4401): check RAYDBG_TOKEN or --token-file",
    4404: "no such debug session (4404): it may have resumed or its worker died",
    4409: "another client is already attached to this worker (4409)",
    4502: "the paused process cannot be reached (4502): its worker may have died",
}

HANDSHAKE_REASONS = {
    401: "the gateway refused the token (HTTP 401): check RAYDBG_TOKEN or --token-file",
    404: "no such debug session (HTTP 404): it may have resumed or its worker died",
    409: "session not attachable yet, or another client is attached (HTTP 409)",
    502: "the gateway would not relay to the session's node (HTTP 502): Ray does not list "
         "its node alive with a raydbg agent at its address",
    503: "the gateway is busy (HTTP 503): try again",
}


async def open_tcp(
    host: str, port: int, timeout: float = 10.0
) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    """Connect to a DAP server (debugpy, ``raydbg forward``) over TCP."""
    try:
        return await asyncio.wait_for(asyncio.open_connection(host, port), timeout)
    except (OSError, asyncio.TimeoutError) as exc:
        raise DapConnectionLost(f"cannot connect to DAP server {host}:{port}: {exc}") from None


class MemoryWriter:
    """A StreamWriter-like end that feeds an ``asyncio.StreamReader``."""

    def __init__(self, target: asyncio.StreamReader) -> None:
        self.target = target
        self.closed = False

    def write(self, data: bytes) -> None:
        if self.closed:
            raise ConnectionResetError("memory pipe is closed")
        self.target.feed_data(data)

    async def drain(self) -> None:
        await asyncio.sleep(0)

    def close(self) -> None:
        if not self.closed:
            self.closed = True
            self.target.feed_eof()

    def is_closing(self) -> bool:
        return self.closed

    async def wait_closed(self) -> None:
        return None


def memory_pipe() -> tuple[asyncio.StreamReader, MemoryWriter]:
    """One direction of an in-process byte stream: bytes written to the writer are read."""
    reader = asyncio.StreamReader()
    return reader, MemoryWriter(reader)


class WebSocketWriter:
    """A StreamWriter-like end that sends bytes as binary WebSocket messages.

    ``write`` buffers; ``drain`` sends what is buffered, in order, under a lock.
    """

    def __init__(self, ws: aiohttp.ClientWebSocketResponse, owner: WebSocketStream) -> None:
        self._ws = ws
        self._owner = owner
        self._buffer: list[bytes] = []
        self._lock = asyncio.Lock()

    def write(self, data: bytes) -> None:
        if self._ws.closed:
            raise ConnectionResetError("the DAP WebSocket is closed")
        self._buffer.append(bytes(data))

    async def drain(self) -> None:
        async with self._lock:
            if not self._buffer:
                return
            data = b"".join(self._buffer)
            self._buffer.clear()
            try:
                await self._ws.send_bytes(data)
            except (ConnectionError, RuntimeError) as exc:
                raise ConnectionResetError(f"the DAP WebSocket is closed: {exc}") from None

    def close(self) -> None:
        self._owner.close()

    def is_closing(self) -> bool:
        return self._ws.closed

    async def wait_closed(self) -> None:
        await self._owner.wait_closed()


class WebSocketStream:
    """Turns a connected WebSocket into a (StreamReader, StreamWriter-like) pair."""

    def __init__(
        self, ws: aiohttp.ClientWebSocketResponse, session: aiohttp.ClientSession | None = None
    ) -> None:
        self.ws = ws
        self._session = session  # closed with the stream when we created it
        self.reader = asyncio.StreamReader(limit=2**20)
        self.writer = WebSocketWriter(ws, self)
        self._pump = asyncio.get_running_loop().create_task(self._receive())
        self._closing: asyncio.Task[None] | None = None

    async def _receive(self) -> None:
        try:
            while True:
                msg = await self.ws.receive()
                if msg.type == aiohttp.WSMsgType.BINARY:
                    self.reader.feed_data(msg.data)
                elif msg.type == aiohttp.WSMsgType.TEXT:
                    self.reader.feed_data(msg.data.encode("utf-8"))
                else:  # CLOSE, CLOSING, CLOSED, ERROR
                    break
        except (aiohttp.ClientError, ConnectionError) as exc:
            self.reader.set_exception(DapConnectionLost(f"DAP WebSocket failed: {exc}"))
            return
        code = self.ws.close_code
        if code in RELAY_CLOSE_REASONS:
            self.reader.set_exception(DapConnectionLost(RELAY_CLOSE_REASONS[code]))
        elif code not in (None, 1000):
            self.reader.set_exception(DapConnectionLost(f"DAP relay closed (code {code})"))
        else:
            self.reader.feed_eof()

    def close(self) -> None:
        if self._closing is None:
            self._closing = asyncio.get_running_loop().create_task(self._close())

    async def _close(self) -> None:
        with contextlib.suppress(Exception):
            await self.writer.drain()
        with contextlib.suppress(Exception):
            await self.ws.close()
        self._pump.cancel()
        with contextlib.suppress(BaseException):
            await self._pump
        if self._session is not None:
            with contextlib.suppress(Exception):
                await self._session.close()

    async def wait_closed(self) -> None:
        self.close()
        assert self._closing is not None
        await asyncio.shield(self._closing)


async def open_websocket(
    url: str,
    token: str | None = None,
    *,
    session: aiohttp.ClientSession | None = None,
    timeout: float = 10.0,
    **ws_kwargs: Any,
) -> tuple[asyncio.StreamReader, WebSocketWriter]:
    """Open the relay WebSocket (bearer token) and return DAP reader/writer ends."""
    own = session is None
    client = session or aiohttp.ClientSession()
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    options: dict[str, Any] = {"max_msg_size": MAX_WS_MESSAGE, "heartbeat": WS_HEARTBEAT_S, "autoping": True}
    options.update(ws_kwargs)
    try:
        connect = client.ws_connect(
            url,
            headers=headers,
            timeout=aiohttp.ClientWSTimeout(ws_close=timeout),
            **options,
        )
        ws = await asyncio.wait_for(connect, timeout)
    except aiohttp.WSServerHandshakeError as exc:
        if own:
            await client.close()
        raise DapConnectionLost(
            HANDSHAKE_REASONS.get(exc.status, f"DAP relay refused the connection (HTTP {exc.status})")
        ) from None
    except (aiohttp.ClientError, OSError, asyncio.TimeoutError) as exc:
        if own:
            await client.close()
        raise DapConnectionLost(
            f"cannot reach the DAP relay at {url}: {exc or type(exc).__name__}"
        ) from None
    stream = WebSocketStream(ws, client if own else None)
    return stream.reader, stream.writer
