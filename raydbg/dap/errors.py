"""Exceptions raised by the DAP client, one per way a debug conversation can fail."""

from __future__ import annotations

from typing import Any


class DapException(Exception):
    """Base class of every error raised by ``raydbg.dap``."""


class DapError(DapException):
    """The peer answered a request with ``success: false``."""

    def __init__(self, command: str, message: str, body: dict[str, Any] | None = None) -> None:
        super().__init__(f"{command} failed: {message}")
        self.command = command
        self.message = message
        self.body: dict[str, Any] = body or {}


class DapConnectionLost(DapException, ConnectionError):
    """The transport is gone (peer closed, refused, or unreachable); no reply will come."""


class DapProtocolError(DapConnectionLost):
    """The peer sent bytes that are not valid DAP; the connection is closed."""


class DapTimeout(DapException, TimeoutError):
    """A reply or event did not arrive in time; the connection may still be usable."""
