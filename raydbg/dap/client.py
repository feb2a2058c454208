"""``DapClient``: typed helpers over a ``DapChannel`` for the requests a debugger UI sends."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any, cast

from raydbg.dap.channel import DapChannel, EventCallback, EventPredicate, Message
from raydbg.dap.errors import DapConnectionLost, DapTimeout
from raydbg.dap.framing import ByteReader, ByteWriter
from raydbg.dap.types import (
    Capabilities,
    EvaluateResult,
    Scope,
    StackFrame,
    Thread,
    Variable,
)

DEFAULT_TIMEOUT = 10.0


class DapClient:
    """One debug conversation. Every request has a timeout (seconds)."""

    def __init__(
        self, reader: ByteReader, writer: ByteWriter, *, timeout: float = DEFAULT_TIMEOUT
    ) -> None:
        self.channel = DapChannel(reader, writer)
        self.timeout = timeout
        self.capabilities: Capabilities = {}
        self.channel.start()

    # -- plumbing --------------------------------------------------------------

    async def request(
        self, command: str, arguments: dict[str, Any] | None = None, timeout: float | None = None
    ) -> Message:
        return await self.channel.request(command, arguments, timeout or self.timeout)

    def subscribe(self, event: str | None, callback: EventCallback) -> Callable[[], None]:
        return self.channel.subscribe(event, callback)

    def expect_event(
        self, event: str, predicate: EventPredicate | None = None
    ) -> asyncio.Future[Message]:
        return self.channel.expect_event(event, predicate)

    async def wait_for_event(
        self,
        event: str,
        predicate: EventPredicate | None = None,
        timeout: float | None = None,
        future: asyncio.Future[Message] | None = None,
    ) -> Message:
        return await self.channel.wait_for_event(
            event, predicate, timeout or self.timeout, future=future
        )

    @property
    def is_open(self) -> bool:
        return self.channel.is_open

    async def close(self) -> None:
        await self.channel.close()

    # -- handshake -------------------------------------------------------------

    async def initialize(
        self, client_id: str = "raydbg", adapter_id: str = "debugpy", timeout: float | None = None
    ) -> Capabilities:
        self.capabilities = await self.request(
            "initialize",
            {
                "clientID": client_id,
                "clientName": "raydbg",
                "adapterID": adapter_id,
                "pathFormat": "path",
                "linesStartAt1": True,
                "columnsStartAt1": True,
                "supportsVariableType": True,
                "supportsVariablePaging": True,
                "supportsRunInTerminalRequest": False,
            },
            timeout,
        )
        return self.capabilities

    async def attach(
        self, arguments: dict[str, Any] | None = None, timeout: float | None = None
    ) -> Message:
        """Attach and wait for the reply (debugpy holds it until configurationDone)."""
        return await self.request("attach", arguments or {}, timeout)

    async def configuration_done(self, timeout: float | None = None) -> None:
        await self.request("configurationDone", None, timeout)

    async def set_exception_breakpoints(
        self, filters: list[str], timeout: float | None = None
    ) -> None:
        await self.request("setExceptionBreakpoints", {"filters": filters}, timeout)

    # -- inspection ------------------------------------------------------------

    async def threads(self, timeout: float | None = None) -> list[Thread]:
        body = await self.request("threads", None, timeout)
        return cast(list[Thread], body.get("threads", []))

    async def stack_trace(
        self, thread_id: int, start_frame: int = 0, levels: int = 0, timeout: float | None = None
    ) -> list[StackFrame]:
        args = {"threadId": thread_id, "startFrame": start_frame, "levels": levels}
        body = await self.request("stackTrace", args, timeout)
        return cast(list[StackFrame], body.get("stackFrames", []))

    async def scopes(self, frame_id: int, timeout: float | None = None) -> list[Scope]:
        body = await self.request("scopes", {"frameId": frame_id}, timeout)
        return cast(list[Scope], body.get("scopes", []))

    async def variables(
        self, reference: int, start: int = 0, count: int = 0, timeout: float | None = None
    ) -> list[Variable]:
        args: dict[str, Any] = {"variablesReference": reference}
        if count:
            args.update(start=start, count=count)
        body = await self.request("variables", args, timeout)
        return cast(list[Variable], body.get("variables", []))

    async def evaluate(
        self,
        expression: str,
        frame_id: int | None = None,
        context: str = "repl",
        timeout: float | None = None,
    ) -> EvaluateResult:
        args: dict[str, Any] = {"expression": expression, "context": context}
        if frame_id is not None:
            args["frameId"] = frame_id
        return cast(EvaluateResult, await self.request("evaluate", args, timeout))

    # -- execution control -----------------------------------------------------

    async def continue_(self, thread_id: int, timeout: float | None = None) -> Message:
        return await self.request("continue", {"threadId": thread_id}, timeout)

    async def next(self, thread_id: int, timeout: float | None = None) -> None:
        await self.request("next", {"threadId": thread_id}, timeout)

    async def step_in(self, thread_id: int, timeout: float | None = None) -> None:
        await self.request("stepIn", {"threadId": thread_id}, timeout)

    async def step_out(self, thread_id: int, timeout: float | None = None) -> None:
        await self.request("stepOut", {"threadId": thread_id}, timeout)

    async def pause(self, thread_id: int, timeout: float | None = None) -> None:
        await self.request("pause", {"threadId": thread_id}, timeout)

    async def disconnect(
        self, terminate_debuggee: bool = False, timeout: float | None = None
    ) -> None:
        """Detach (the debuggee keeps running) and close; a dead peer is not an error."""
        try:
            await self.request(
                "disconnect", {"terminateDebuggee": terminate_debuggee}, timeout or 3.0
            )
        except (DapConnectionLost, DapTimeout):
            pass
        finally:
            await self.close()
