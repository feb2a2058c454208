"""What the TUI needs from the gateway, and the adapter over ``raydbg.client.Gateway``."""

from __future__ import annotations

from typing import Any, Protocol
from urllib.parse import quote, urlencode

from raydbg.client import Gateway, GatewayError
from raydbg.dap import DapConnectionLost, open_websocket
from raydbg.dap.framing import ByteReader, ByteWriter

__all__ = ["GatewayError", "TuiGateway", "HttpGateway", "Backoff"]


class TuiGateway(Protocol):
    """The gateway calls the TUI makes; tests may pass any object with these."""

    address: str

    async def sessions(self) -> list[dict[str, Any]]: ...

    async def session(self, sid: str) -> dict[str, Any]: ...

    async def nodes(self) -> list[dict[str, Any]]: ...

    async def events(self, limit: int = 100) -> list[dict[str, Any]]: ...

    async def connect_dap(self, sid: str) -> tuple[ByteReader, ByteWriter]: ...


class HttpGateway(Gateway):
    """``raydbg.client.Gateway`` plus the DAP relay as a byte stream."""

    async def stacks(self, job: str | None = None, run: str | None = None) -> dict[str, Any]:
        from raydbg.gang.cli import stacks_path

        return dict(await self.get(stacks_path(job, run, False), timeout=60.0))

    async def breakpoints(self, job: str | None = None) -> list[dict[str, Any]]:
        """Armed breakpoints (with ``job``: that job's and every job's)."""
        path = "/api/v1/breakpoints" + (f"?{urlencode({'job': job})}" if job else "")
        answer = await self.get(path)
        if not isinstance(answer, dict) or not isinstance(answer.get("breakpoints"), list):
            raise GatewayError(f"{self.address} sent no list of breakpoints: is it a raydbg gateway of this version?")
        return [b for b in answer["breakpoints"] if isinstance(b, dict)]

    async def remove_breakpoint(self, bid: str) -> None:
        await self.delete(f"/api/v1/breakpoints/{quote(bid, safe='')}")

    async def connect_dap(self, sid: str) -> tuple[ByteReader, ByteWriter]:
        try:
            return await open_websocket(self.url(f"/api/v1/sessions/{sid}/dap"), self.token)
        except DapConnectionLost as exc:
            raise GatewayError(str(exc)) from None


class Backoff:
    """Retry delays after failures: 0.5 s doubling to ``cap``; reset on success."""

    def __init__(self, first: float = 0.5, cap: float = 10.0) -> None:
        self.first = first
        self.cap = cap
        self.failures = 0

    def next_delay(self) -> float:
        delay = min(self.cap, self.first * (2**self.failures))
        self.failures += 1
        return delay

    def reset(self) -> None:
        self.failures = 0
