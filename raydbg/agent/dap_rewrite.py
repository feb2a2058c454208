"""Rewrites a client's DAP stream so each paused thread is its own session (no Ray import)."""

from __future__ import annotations

import json
from typing import Any

HEADER_END = b"\r\n\r\n"
MAX_HEADER = 4096
MAX_BODY = 64 * 1024 * 1024


class DapStreamError(Exception):
    """The client sent bytes that are not DAP."""

    def __init__(self, message: str) -> None:
        # It becomes a WebSocket close reason, which must fit a control frame (123 bytes).
        super().__init__(message if len(message) <= 100 else message[:97] + "...")


def encode(message: dict[str, Any]) -> bytes:
    body = json.dumps(message, separators=(",", ":")).encode()
    return b"Content-Length: %d\r\n\r\n" % len(body) + body


def rewrite(message: dict[str, Any]) -> dict[str, Any]:
    """Per-thread stops: VS Code and most clients never ask for them themselves."""
    if message.get("type") != "request":
        return message
    command = message.get("command")
    args = message.setdefault("arguments", {}) if command in ("attach", "continue") else None
    if command == "attach" and isinstance(args, dict):
        args.setdefault("stopAllThreadsOnSuspend", False)
        args.setdefault("steppingResumesAllThreads", False)
    elif command == "continue" and isinstance(args, dict):
        args.setdefault("singleThread", True)
    return message


class DapReframer:
    """Incremental parser: feed raw bytes, get whole rewritten messages back as bytes."""

    def __init__(self) -> None:
        self._buf = bytearray()

    def feed(self, data: bytes) -> list[bytes]:
        self._buf += data
        out: list[bytes] = []
        while True:
            end = self._buf.find(HEADER_END)
            if end < 0:
                if len(self._buf) > MAX_HEADER:
                    raise DapStreamError("DAP header too long or missing")
                return out
            length = _content_length(bytes(self._buf[:end]))
            start = end + len(HEADER_END)
            if len(self._buf) < start + length:
                return out
            body = bytes(self._buf[start:start + length])
            del self._buf[:start + length]
            try:
                message = json.loads(body)
            except (ValueError, RecursionError) as exc:  # deep nesting: not a crash
                raise DapStreamError(f"DAP body is not JSON: {exc}") from None
            if not isinstance(message, dict):
                raise DapStreamError("DAP message is not a JSON object")
            try:
                out.append(encode(rewrite(message)))
            except (ValueError, RecursionError) as exc:
                raise DapStreamError(f"DAP message cannot be re-encoded: {exc}") from None


def _content_length(header: bytes) -> int:
    for line in header.split(b"\r\n"):
        name, _, value = line.partition(b":")
        if name.strip().lower() == b"content-length":
            try:
                length = int(value.strip())
            except ValueError:
                break
            if 0 <= length <= MAX_BODY:
                return length
            break
    raise DapStreamError("DAP header has no valid Content-Length")
