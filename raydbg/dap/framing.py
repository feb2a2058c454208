"""DAP wire framing: ``Content-Length`` headers around JSON bodies on byte streams."""

from __future__ import annotations

import asyncio
import json
from typing import Any, Protocol

from raydbg.dap.errors import DapConnectionLost, DapProtocolError

# A DAP body larger than this is a broken peer, not a big variable (values are paged).
MAX_BODY_BYTES = 64 * 1024 * 1024
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
    body = json.dumps(message, separators=(",", ":"), ensure_ascii=False).encode("utf-8")
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
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise DapProtocolError(f"DAP body is not valid JSON: {exc}") from None
    if not isinstance(message, dict) or not isinstance(message.get("type"), str):
        raise DapProtocolError(f"DAP body is not a message object: {body[:80]!r}")
    return message


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
