"""The DAP relay: an authenticated WebSocket on one side, the worker's loopback debugpy on the other."""

from __future__ import annotations

import asyncio
import logging
import os
from dataclasses import dataclass
from typing import Any

import aiohttp
from aiohttp import web

from raydbg import api_transport, debug_socket
from raydbg.agent.dap_rewrite import (
    MAX_BODY,
    MAX_HEADER,
    DapParser,
    DapReframer,
    DapStreamError,
    StopFocus,
    encode,
)
from raydbg.api_errors import ApiError, Conflict, NotFound, Unreachable

log = logging.getLogger("raydbg.agent")

CLOSE_BAD_TOKEN = 4401
CLOSE_UNKNOWN_SESSION = 4404
CLOSE_BUSY = 4409
CLOSE_UNREACHABLE = 4502

# The biggest WebSocket message taken: one whole DAP message the reframer accepts.
MAX_MESSAGE = MAX_HEADER + MAX_BODY
CONNECT_TIMEOUT_S = 10.0
HEARTBEAT_S = 10.0


def heartbeat_s() -> float:
    """Ping interval of relay WebSockets; a peer silent for 1.5x this is dropped (its session freed)."""
    try:
        value = float(os.environ.get("RAYDBG_WS_HEARTBEAT_S", HEARTBEAT_S))
    except ValueError:
        return HEARTBEAT_S
    return value if 0.5 <= value <= 3600 else HEARTBEAT_S


def close_reason(text: str) -> bytes:
    """A WebSocket close reason must fit a control frame (123 bytes), or the client sees
    a protocol error (1002) instead of the relay's close code."""
    return text.encode()[:123].decode(errors="ignore").encode()


@dataclass(frozen=True)
class DebuggeeAddress:
    """Where a session's worker on this node listens: its private socket (or, in
    compatibility mode only, a loopback TCP port)."""

    pid: int
    socket: str | None
    port: int | None

    @classmethod
    def of(cls, rec: dict[str, Any]) -> DebuggeeAddress:
        return cls(int(rec.get("pid", 0)), rec.get("socket"), rec.get("port"))

    async def open(self) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
        if not self.socket:
            return await asyncio.open_connection("127.0.0.1", int(self.port or 0))
        path = debug_socket.expected_path(self.pid, self.socket)
        reader, writer = await asyncio.open_unix_connection(str(path))
        # The listener must be the session's worker, running as us: a record in the KV
        # names a pid, and only that process may be at the other end.
        pid, uid, _ = debug_socket.peer_credentials(writer.get_extra_info("socket"))
        if pid != self.pid or uid != os.getuid():
            writer.close()
            raise PermissionError(f"{path} is held by pid {pid} uid {uid}, not the session's worker")
        return reader, writer


async def to_debugpy(ws: web.WebSocketResponse, debuggee: DebuggeeAddress,
                     thread_name: str | None = None) -> None:
    """Pipe a client WebSocket to the worker's debugger on this node.

    debugpy is only dialled once a whole DAP message has arrived: a bare connect+close
    wedges debugpy's adapter for good (FACTS.md), so nothing but a real client reaches it.
    `thread_name`: the session's thread; its `stopped` event reaches the client first
    (dap_rewrite.StopFocus).
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
                    reader, writer = await debuggee.open()
                except (OSError, debug_socket.UnsafeDirError) as exc:
                    await ws.close(code=CLOSE_UNREACHABLE, message=close_reason(f"debuggee unreachable: {exc}"))
                    break
                pump = asyncio.ensure_future(_tcp_to_ws(reader, ws, StopFocus(thread_name), writer))
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


async def _tcp_to_ws(reader: asyncio.StreamReader, ws: web.WebSocketResponse,
                     focus: StopFocus | None = None, writer: asyncio.StreamWriter | None = None) -> None:
    try:
        if focus is not None and writer is not None and not focus.done:
            await _focused(reader, ws, focus, writer)
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


async def _focused(reader: asyncio.StreamReader, ws: web.WebSocketResponse, focus: StopFocus,
                   writer: asyncio.StreamWriter) -> None:
    """debugpy's messages parsed (and the stops put in order) until the session's thread
    has stopped in front of the client; then the bytes left over go out as they are."""
    loop = asyncio.get_running_loop()
    parser = DapParser()
    while not focus.done:
        timeout = None if focus.deadline is None else max(0.0, focus.deadline - loop.time())
        try:
            data = await asyncio.wait_for(reader.read(65536), timeout)
        except asyncio.TimeoutError:
            data = None
        if data == b"":  # debugpy went away: what is held goes out, then the relay ends
            for message in focus.expire(float("inf")):
                await ws.send_bytes(encode(message))
            raise ConnectionError("debugpy closed")
        out: list[dict[str, Any]] = []
        try:
            messages = parser.feed(data) if data else []
        except DapStreamError as exc:  # not for us to judge: stop looking, pass it on
            log.warning("raydbg relay: debugpy sent %s; not ordering its stops", exc)
            out, rest = focus.expire(float("inf")), parser.take_rest()
            for message in out:
                await ws.send_bytes(encode(message))
            await ws.send_bytes(rest)
            return
        for message in messages:
            to_client, to_debuggee = focus.from_debuggee(message, loop.time())
            out += to_client
            for request in to_debuggee:
                writer.write(encode(request))
        out += focus.expire(loop.time())
        for message in out:
            await ws.send_bytes(encode(message))
    rest = parser.take_rest()
    if rest:
        await ws.send_bytes(rest)


async def open_agent(peer: api_transport.Peer, sid: str) -> tuple[aiohttp.ClientSession, aiohttp.ClientWebSocketResponse]:
    """Open the relay WebSocket to another node's agent (same path, same token).

    Done before the client's own upgrade, so the peer's 404/409 reach the client as such;
    any other refusal, and an agent out of reach, is a 502 (api_errors.Unreachable).
    """
    http = aiohttp.ClientSession()
    try:
        peer_ws = await api_transport.open_ws(peer, http, f"/api/v1/sessions/{sid}/dap", max_msg_size=MAX_MESSAGE,
                                              heartbeat=heartbeat_s(), timeout=CONNECT_TIMEOUT_S)
    except (NotFound, Conflict) as exc:
        await http.close()
        raise type(exc)(f"the session's node agent answered HTTP {exc.status}") from None
    except ApiError as exc:
        await http.close()
        raise Unreachable(f"the session's node agent: {exc}") from None
    except BaseException:
        await http.close()
        raise
    return http, peer_ws


async def pipe_agent(ws: web.WebSocketResponse, http: aiohttp.ClientSession,
                     peer: aiohttp.ClientWebSocketResponse) -> None:
    """Pipe a client WebSocket to an opened agent WebSocket until either side ends."""
    try:
        await asyncio.gather(_ws_pipe(ws, peer), _ws_pipe(peer, ws))
    finally:
        if not peer.closed:
            await peer.close()
        await http.close()


def _close_code(src: Any) -> int:
    """The code to pass on when `src` closed: its own when it is one a peer may send."""
    code = src.close_code
    if isinstance(code, int) and (3000 <= code <= 4999 or code in (1000, 1001, 1003, 1007, 1008, 1009, 1011)):
        return code
    return CLOSE_UNREACHABLE if code is not None else 1000


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
            await dst.close(code=_close_code(src))
