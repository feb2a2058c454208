"""DAP wire framing: ``Content-Length`` headers around JSON bodies on byte streams.

The one home of the framing: the DAP client reads from a stream (`read_message`), the
relay parses bytes as they come off a WebSocket or a socket (`FrameParser`, sans I/O).
"""

from __future__ import annotations

import asyncio
import json
from typing import Any, Protocol

from raydbg.dap.errors import DapConnectionLost, DapProtocolError

# A DAP body larger than this is a broken peer, not a big variable (values are paged).
MAX_BODY_BYTES = 64 * 1024 * 1024
# A header block still without its blank line after this many bytes is not DAP.
MAX_HEADER_BYTES = 4096
HEADER_END = b"\r\n\r\n"


class ByteReader(Protocol):
    """What framing needs from a reader (``asyncio.StreamReader`` fits)."""

    async def readuntil(self, separator: bytes = ...) -> bytes: ...

    async def readexactly(self, n: int) -> bytes: ...


class ByteWriter(Protocol):
    """What framing needs from a writer (``asyncio.StreamWriter`` fits)."""

    def write(self, data: bytes) -> None: ...

    async def drain(self) -> None: ...

    def close(self) -> None: ...

    async def wait_closed(self) -> None: ...


def encode_message(message: dict[str, Any]) -> bytes:
    """Serialize one DAP message with its header, exactly as it goes on the wire."""
    try:
        body = json.dumps(message, separators=(",", ":"), ensure_ascii=False).encode("utf-8")
    except UnicodeEncodeError:  # a lone surrogate (an undecodable file name): JSON escapes it
        body = json.dumps(message, separators=(",", ":")).encode("ascii")
    return b"Content-Length: %d\r\n\r\n" % len(body) + body


def parse_headers(block: bytes) -> int:
    """Return the Content-Length from a header block (ending in a blank line)."""
    length: int | None = None
    for raw in block[: -len(HEADER_END)].split(b"\r\n"):
        name, sep, value = raw.partition(b":")
        if not sep:
            raise DapProtocolError(f"malformed DAP header line {raw[:80]!r}")
        if name.strip().lower() == b"content-length":
            try:
                length = int(value.strip())
            except ValueError:
                raise DapProtocolError(f"bad Content-Length {value.strip()[:40]!r}") from None
        # Other headers (e.g. Content-Type) are allowed and ignored, as the spec says.
    if length is None:
        raise DapProtocolError("DAP message without a Content-Length header")
    if length < 0 or length > MAX_BODY_BYTES:
        raise DapProtocolError(f"DAP Content-Length {length} out of range")
    return length


def decode_body(body: bytes) -> dict[str, Any]:
    """Parse a message body; it must be a JSON object with a ``type``."""
    try:
        message = json.loads(body.decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError, RecursionError) as exc:  # deep nesting: not a crash
        raise DapProtocolError(f"DAP body is not valid JSON: {exc}") from None
    if not isinstance(message, dict) or not isinstance(message.get("type"), str):
        raise DapProtocolError(f"DAP body is not a message object: {body[:80]!r}")
    return message


class FrameParser:
    """Sans I/O: feed bytes as they come, get whole messages back; DapProtocolError on what is not DAP."""

    def __init__(self) -> None:
        self._buf = bytearray()

    def take_rest(self) -> bytes:
        """The bytes fed but not yet parsed (a partial message); the buffer is emptied."""
        rest = bytes(self._buf)
        self._buf.clear()
        return rest

    def feed(self, data: bytes) -> list[dict[str, Any]]:
        self._buf += data
        out: list[dict[str, Any]] = []
        while True:
            end = self._buf.find(HEADER_END)
            if end < 0:
                if len(self._buf) > MAX_HEADER_BYTES:
                    raise DapProtocolError("DAP header too long or missing")
                return out
            start = end + len(HEADER_END)
            length = parse_headers(bytes(self._buf[:start]))
            if len(self._buf) < start + length:
                return out
            body = bytes(self._buf[start:start + length])
            del self._buf[:start + length]
            out.append(decode_body(body))


async def read_message(reader: ByteReader) -> dict[str, Any] | None:
    """Read one message; ``None`` on a clean end of stream between messages."""
    try:
        block = await reader.readuntil(HEADER_END)
    except asyncio.IncompleteReadError as exc:
        if not exc.partial:
            return None
        raise DapConnectionLost("DAP peer closed the stream inside a message header") from None
    except asyncio.LimitOverrunError:
        raise DapProtocolError("DAP header block too long (no blank line)") from None
    length = parse_headers(block)
    try:
        body = await reader.readexactly(length)
    except asyncio.IncompleteReadError:
        raise DapConnectionLost(
            f"DAP peer closed the stream inside a {length}-byte message body"
        ) from None
    return decode_body(body)


async def write_message(writer: ByteWriter, message: dict[str, Any]) -> None:
    """Write one message in a single ``write`` call (so frames never interleave)."""
    writer.write(encode_message(message))
    await writer.drain()
