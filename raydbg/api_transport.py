"""One client for raydbg's HTTP API: request building, the token header, timeouts, JSON decoding, the error map.

Two faces over the same request and answer code: `call` blocks (http.client: a CLI command
makes one call and imports neither asyncio nor aiohttp for it), `acall` and `open_ws` are
asyncio (aiohttp: the gateway fanning out to node agents, `raydbg forward`, the relay).
Every failure is a typed `api_errors.ApiError` whose line names the peer and what to do:
the CLI prints it, the gateway answers it on.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any
from urllib.parse import urlencode

from raydbg.api_errors import (
    ApiError,
    NotJson,
    Timeout,
    Unauthorized,
    Unreachable,
    from_status,
    message_of,
)

if TYPE_CHECKING:
    import aiohttp

DEFAULT_TIMEOUT_S = 10.0


@dataclass(frozen=True)
class Peer:
    """Who is called (HOST:PORT and the token it takes), and how its errors name it and say what to do."""

    address: str
    token: str
    name: str = "the raydbg gateway"
    down_hint: str = "is `raydbg up` running?"
    token_hint: str = "check RAYDBG_TOKEN / --token-file"
    json_hint: str = "is RAYDBG_GATEWAY / --address a raydbg gateway?"

    @property
    def headers(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.token}"}

    def host_port(self) -> tuple[str, int]:
        host, _, port = self.address.rpartition(":")
        if not host or not port.isdigit():
            raise ApiError(f"{self.name} address {self.address!r} is not HOST:PORT")
        return host.strip("[]"), int(port)

    def url(self, path: str, scheme: str = "http") -> str:
        host, port = self.host_port()
        return f"{scheme}://{f'[{host}]' if ':' in host else host}:{port}{path}"

    def where(self) -> str:
        return f"{self.name} at {self.address}"


def with_query(path: str, params: dict[str, str] | None) -> str:
    return f"{path}?{urlencode(params)}" if params else path


def request_parts(peer: Peer, body: Any) -> tuple[dict[str, str], bytes | None]:
    """The headers and payload of a call: the bearer token, `body` (when given) as JSON."""
    headers = dict(peer.headers)
    if body is None:
        return headers, None
    headers["Content-Type"] = "application/json"
    return headers, json.dumps(body).encode()


def answer(peer: Peer, status: int, data: bytes) -> Any:
    """The decoded JSON of an answer; an error status becomes its typed error with the peer's own line."""
    if status == 401:
        raise Unauthorized(f"{peer.where()} refused the token: {peer.token_hint}")
    try:
        decoded = json.loads(data)
    except ValueError:
        raise NotJson(f"{peer.address} answered {status} with something that is not JSON: {peer.json_hint}") from None
    if status >= 400:
        raise from_status(status, message_of(decoded) or f"{peer.where()} answered HTTP {status}")
    return decoded


def unreachable(peer: Peer) -> Unreachable:
    return Unreachable(f"cannot connect to {peer.where()}" + (f": {peer.down_hint}" if peer.down_hint else ""))


def timed_out(peer: Peer, timeout: float) -> Timeout:
    return Timeout(f"{peer.where()}: no answer within {timeout:g} s")


def failed(peer: Peer, exc: BaseException) -> Unreachable:
    return Unreachable(f"{peer.where()}: {exc or type(exc).__name__}")


# --- the blocking face ---------------------------------------------------------------------
def call(peer: Peer, method: str, path: str, body: Any = None, timeout: float = DEFAULT_TIMEOUT_S) -> Any:
    """One call, blocking; `body`, when given, sent as JSON. The JSON answer, or an ApiError."""
    import http.client
    import socket

    host, port = peer.host_port()
    headers, payload = request_parts(peer, body)
    conn = http.client.HTTPConnection(host, port, timeout=timeout)
    try:
        conn.request(method, path, body=payload, headers=headers)
        resp = conn.getresponse()
        status, data = resp.status, resp.read()
    except (ConnectionRefusedError, socket.gaierror):
        raise unreachable(peer) from None
    except TimeoutError:
        raise timed_out(peer, timeout) from None
    except (OSError, http.client.HTTPException) as exc:
        raise failed(peer, exc) from None
    finally:
        conn.close()
    return answer(peer, status, data)


# --- the asyncio face ----------------------------------------------------------------------
async def acall(peer: Peer, http: aiohttp.ClientSession, method: str, path: str, body: Any = None,
                params: dict[str, str] | None = None, timeout: float = DEFAULT_TIMEOUT_S) -> Any:
    """`call` on an aiohttp session (its connection pool shared by a fan-out)."""
    import aiohttp

    headers, payload = request_parts(peer, body)
    with _aiohttp_errors(peer, timeout):
        async with http.request(method, peer.url(with_query(path, params)), data=payload, headers=headers,
                                timeout=aiohttp.ClientTimeout(total=timeout)) as resp:
            status, data = resp.status, await resp.read()
    return answer(peer, status, data)


async def open_ws(peer: Peer, http: aiohttp.ClientSession, path: str, *, max_msg_size: int, heartbeat: float,
                  timeout: float = DEFAULT_TIMEOUT_S, reasons: dict[int, str] | None = None
                  ) -> aiohttp.ClientWebSocketResponse:
    """A WebSocket to `path` with the token in the handshake. A refused handshake is the
    typed error of its status (`reasons[status]` its line, when given); no WebSocket
    handshake answer carries the peer's body, so the line is ours."""
    import asyncio

    import aiohttp

    with _aiohttp_errors(peer, timeout):
        try:
            return await asyncio.wait_for(http.ws_connect(peer.url(path), headers=peer.headers,
                                                          max_msg_size=max_msg_size, heartbeat=heartbeat), timeout)
        except aiohttp.WSServerHandshakeError as exc:
            if exc.status == 401 and not (reasons and 401 in reasons):
                raise Unauthorized(f"{peer.where()} refused the token: {peer.token_hint}") from None
            raise from_status(exc.status, (reasons or {}).get(exc.status)
                              or f"{peer.where()} refused the WebSocket: HTTP {exc.status}") from None


@contextmanager
def _aiohttp_errors(peer: Peer, timeout: float) -> Iterator[None]:
    """aiohttp's and the socket's failures as the typed errors `call` raises for the same causes."""
    import asyncio

    import aiohttp

    try:
        yield
    except ApiError:  # already typed (a refused handshake; Timeout is an OSError too)
        raise
    except aiohttp.ClientConnectorError:
        raise unreachable(peer) from None
    except asyncio.TimeoutError:
        raise timed_out(peer, timeout) from None
    except (aiohttp.ClientError, OSError) as exc:
        raise failed(peer, exc) from None
