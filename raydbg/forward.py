"""`raydbg forward`: a local door a DAP client of the same user attaches to, relayed to a session.

Runs in the user's own process (the CLI). The door is a 127.0.0.1 port or, with `--unix`,
a Unix socket in a 0700 directory. Either way another local user gets nothing: before a
byte is relayed, the connecting peer's uid is checked (SO_PEERCRED; for TCP the kernel's
socket table, local_peer.py) and a peer of another uid is refused, logged and counted.
"""

from __future__ import annotations

import asyncio
import logging
import os
import stat
from pathlib import Path

import aiohttp

from raydbg import config, telemetry
from raydbg.client import Gateway, GatewayError
from raydbg.local_peer import peer_uid
from raydbg.private_dir import UnsafeDirError, check_private, runtime_dir

log = logging.getLogger("raydbg")

REFUSED = telemetry.counter("raydbg.forward.refused", "{connection}",
                            "Local connections to raydbg forward refused: another uid, or unknown")

# How often a client held for a "starting" session (config.ATTACHABLE_WAIT_S) looks again.
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


def default_unix_path(session_id: str) -> Path:
    """`<tmp>/raydbg-<uid>/forward/<session>.sock`: a private directory of ours."""
    return runtime_dir("forward") / f"{session_id[:16]}.sock"


def _private_socket_path(path: Path) -> Path:
    """`path` for a new socket: its directory ours and closed to others (made 0700 if
    missing); an old socket of ours there is replaced, anything else is refused."""
    parent = path.parent
    if not parent.exists():
        parent.mkdir(mode=0o700, parents=True)
    try:
        check_private(parent)
    except UnsafeDirError as exc:
        raise GatewayError(f"{exc} (--unix needs a socket path in a directory only you can enter)") from None
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return path
    if stat.S_ISSOCK(st.st_mode) and st.st_uid == os.getuid():
        path.unlink()  # left by an earlier `raydbg forward`
        return path
    raise GatewayError(f"{path} exists and is not an old socket of yours: remove it or pick another path")


class Forwarder:
    """Accepts DAP clients of our own uid on 127.0.0.1:port (or a Unix socket) and relays
    each through the gateway."""

    def __init__(self, gateway: Gateway, session_id: str, port: int = 0,
                 unix_path: Path | None = None) -> None:
        self.gateway = gateway
        self.session_id = session_id
        self.port = port
        self.unix_path = unix_path
        self.server: asyncio.Server | None = None
        self.connections = 0
        self.refused = 0

    async def start(self) -> int:
        """Listen; the port (0 for a Unix socket)."""
        await self.gateway.session(self.session_id)  # unknown id / bad token: fail before listening
        if self.unix_path is not None:
            path = _private_socket_path(self.unix_path)
            try:
                self.server = await asyncio.start_unix_server(self._handle, path)
            except OSError as exc:
                raise GatewayError(f"cannot listen on {path}: {exc.strerror}") from None
            os.chmod(path, 0o600)  # the 0700 directory is the fence; this is belt and braces
            return 0
        try:
            self.server = await asyncio.start_server(self._handle, "127.0.0.1", self.port)
        except OSError as exc:
            raise GatewayError(f"cannot listen on 127.0.0.1:{self.port}: {exc.strerror}") from None
        self.port = self.server.sockets[0].getsockname()[1]
        return self.port

    def _refused(self, writer: asyncio.StreamWriter) -> bool:
        """True (and the connection closed) unless the peer runs as our uid."""
        sock = writer.get_extra_info("socket")  # asyncio's TransportSocket: socket.socket's getters
        uid = peer_uid(sock) if sock is not None else None
        if uid == os.getuid():
            return False
        self.refused += 1
        REFUSED.add(1, reason="unknown peer" if uid is None else "another uid")
        where = self.unix_path or f"127.0.0.1:{self.port}"
        log.warning("raydbg forward: refused a connection on %s from %s (only uid %s may attach)",
                    where, "an unknown peer" if uid is None else f"uid {uid}", os.getuid())
        writer.close()
        return True

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        if self._refused(writer):
            return
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
        deadline = loop.time() + config.ATTACHABLE_WAIT_S
        while loop.time() < deadline:
            rec = await self.gateway.session(self.session_id)
            if rec.get("attachable", True):
                return
            await asyncio.sleep(ATTACHABLE_POLL_S)

    async def close(self) -> None:
        if self.server is not None:
            self.server.close()
            await self.server.wait_closed()
        if self.unix_path is not None:
            self.unix_path.unlink(missing_ok=True)
