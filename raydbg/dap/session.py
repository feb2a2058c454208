"""``attach_session``: debugpy's working attach handshake, ending at the paused thread."""

from __future__ import annotations

import asyncio
from typing import Any

from raydbg.dap.channel import Message
from raydbg.dap.client import DapClient
from raydbg.dap.errors import DapException, DapTimeout
from raydbg.dap.framing import ByteReader, ByteWriter


async def attach_session(
    reader: ByteReader,
    writer: ByteWriter,
    *,
    attach_arguments: dict[str, Any] | None = None,
    exception_filters: list[str] | None = None,
    timeout: float = 10.0,
) -> tuple[DapClient, Message]:
    """Attach to a paused debugpy and return the client and its ``stopped`` event.

    Order (FACTS.md): initialize -> attach (reply held back) -> event
    ``initialized`` -> [setExceptionBreakpoints] -> configurationDone -> both
    replies -> event ``stopped``. On any failure the connection is closed.
    """
    client = DapClient(reader, writer, timeout=timeout)
    # Register both waiters before sending anything: the events may come early.
    initialized = client.expect_event("initialized")
    stopped = client.expect_event("stopped")
    try:
        await client.initialize()
        arguments = {"justMyCode": False, **(attach_arguments or {})}
        attach_reply = await client.channel.send_request("attach", arguments)
        await client.wait_for_event("initialized", future=initialized)
        if exception_filters is not None:
            await client.set_exception_breakpoints(exception_filters)
        await client.configuration_done()
        await client.channel.wait_response(attach_reply, "attach", timeout)
        try:
            event = await client.wait_for_event("stopped", future=stopped)
        except DapTimeout:
            raise DapTimeout(
                f"attached, but the debuggee reported no paused thread within {timeout:g}s"
            ) from None
    except (DapException, asyncio.CancelledError):
        await client.close()
        raise
    return client, event
