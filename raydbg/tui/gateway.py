"""What the TUI needs from the gateway, and the adapter over ``raydbg.client.Gateway``."""

from __future__ import annotations

from typing import Any, Protocol

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

    async def steps(self, job: str | None = None, run: str | None = None) -> dict[str, Any]: ...


class HttpGateway(Gateway):
    """``raydbg.client.Gateway`` (every endpoint, breakpoints included) plus the DAP relay as a byte stream."""

    async def stacks(self, job: str | None = None, run: str | None = None, native: bool = False,
                     pyspy: bool = True, timeout: float = 60.0, thread: bool = True) -> dict[str, Any]:
        # Only the default differs: the TUI's stacks are fetched in the background, and it
        # waits 60 s for them where a CLI command waits 30.
        return await super().stacks(job, run, native, pyspy, timeout, thread)

    async def connect_dap(self, sid: str) -> tuple[ByteReader, ByteWriter]:
        try:
            return await open_websocket(self.dap_url(sid), self.token)
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
