"""In-memory fake DAP peer for the raydbg.dap and TUI unit tests (scripted replies)."""

from __future__ import annotations

import asyncio
from typing import Any

from raydbg.dap import encode_message, memory_pipe, read_message
from raydbg.dap.transport import MemoryWriter


class FakePeer:
    """The far end of an in-memory DAP connection; tests drive it by hand."""

    def __init__(self) -> None:
        self.client_reader, self._to_client = memory_pipe()
        self._from_client, self.client_writer = memory_pipe()
        self._seq = 0

    @property
    def to_client(self) -> MemoryWriter:
        return self._to_client

    async def read(self, timeout: float = 2.0) -> dict[str, Any]:
        message = await asyncio.wait_for(read_message(self._from_client), timeout)
        assert message is not None, "client closed its end"
        return message

    async def read_raw(self, n: int, timeout: float = 2.0) -> bytes:
        return await asyncio.wait_for(self._from_client.readexactly(n), timeout)

    def send_raw(self, data: bytes) -> None:
        self._to_client.write(data)

    def send(self, message: dict[str, Any]) -> None:
        self._seq += 1
        self.send_raw(encode_message({"seq": self._seq, **message}))

    def respond(
        self,
        request: dict[str, Any],
        body: dict[str, Any] | None = None,
        *,
        success: bool = True,
        message: str | None = None,
    ) -> None:
        reply: dict[str, Any] = {
            "type": "response",
            "request_seq": request["seq"],
            "command": request["command"],
            "success": success,
        }
        if body is not None:
            reply["body"] = body
        if message is not None:
            reply["message"] = message
        self.send(reply)

    def event(self, name: str, body: dict[str, Any] | None = None) -> None:
        self.send({"type": "event", "event": name, "body": body or {}})

    def close(self) -> None:
        self._to_client.close()
