"""Asyncio Debug Adapter Protocol client: framing, channel, events, transports (no Ray/Textual)."""

from raydbg.dap.channel import DapChannel
from raydbg.dap.client import DapClient
from raydbg.dap.errors import (
    DapConnectionLost,
    DapError,
    DapException,
    DapProtocolError,
    DapTimeout,
)
from raydbg.dap.framing import encode_message, read_message, write_message
from raydbg.dap.session import attach_session
from raydbg.dap.transport import memory_pipe, open_tcp, open_websocket

__all__ = [
    "DapChannel",
    "DapClient",
    "DapConnectionLost",
    "DapError",
    "DapException",
    "DapProtocolError",
    "DapTimeout",
    "attach_session",
    "encode_message",
    "memory_pipe",
    "open_tcp",
    "open_websocket",
    "read_message",
    "write_message",
]
