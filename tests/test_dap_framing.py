"""Tests of raydbg.dap.framing on in-memory streams: exact bytes, split/merged, malformed."""

from __future__ import annotations

import asyncio

import pytest

from raydbg.dap import DapConnectionLost, DapProtocolError, encode_message, read_message
from raydbg.dap.framing import MAX_BODY_BYTES


def feed(*chunks: bytes, eof: bool = True) -> asyncio.StreamReader:
    reader = asyncio.StreamReader()
    for chunk in chunks:
        reader.feed_data(chunk)
    if eof:
        reader.feed_eof()
    return reader


def test_encode_exact_bytes() -> None:
    data = encode_message({"seq": 1, "type": "request", "command": "threads"})
    assert data == b'Content-Length: 46\r\n\r\n{"seq":1,"type":"request","command":"threads"}'


def test_encode_counts_utf8_bytes_not_characters() -> None:
    data = encode_message({"type": "event", "event": "output", "body": {"output": "é✓"}})
    header, body = data.split(b"\r\n\r\n", 1)
    assert header == b"Content-Length: %d" % len(body)
    assert len(body) == len('{"type":"event","event":"output","body":{"output":"é✓"}}') + 3


async def test_round_trip_and_clean_eof() -> None:
    message = {"seq": 7, "type": "event", "event": "stopped", "body": {"threadId": 1}}
    reader = feed(encode_message(message))
    assert await read_message(reader) == message
    assert await read_message(reader) is None


async def test_split_into_single_bytes() -> None:
    message = {"seq": 3, "type": "response", "request_seq": 2, "success": True}
    reader = asyncio.StreamReader()

    async def dribble() -> None:
        for byte in encode_message(message):
            reader.feed_data(bytes([byte]))
            await asyncio.sleep(0)

    task = asyncio.create_task(dribble())
    assert await asyncio.wait_for(read_message(reader), 2) == message
    await task


async def test_merged_messages_in_one_packet() -> None:
    first = {"seq": 1, "type": "event", "event": "a"}
    second = {"seq": 2, "type": "event", "event": "b"}
    reader = feed(encode_message(first) + encode_message(second))
    assert await read_message(reader) == first
    assert await read_message(reader) == second
    assert await read_message(reader) is None


async def test_other_headers_are_ignored_and_case_is_free() -> None:
    body = b'{"type":"event","event":"x"}'
    raw = b"Content-Type: application/json\r\ncontent-length: %d\r\n\r\n" % len(body) + body
    assert await read_message(feed(raw)) == {"type": "event", "event": "x"}


@pytest.mark.parametrize(
    ("raw", "words"),
    [
        (b"Content-Lenth: 2\r\n\r\n{}", "without a Content-Length"),
        (b"garbage\r\n\r\n", "malformed DAP header"),
        (b"Content-Length: two\r\n\r\n", "bad Content-Length"),
        (b"Content-Length: -1\r\n\r\n", "out of range"),
        (b"Content-Length: %d\r\n\r\n" % (MAX_BODY_BYTES + 1), "out of range"),
        (b"Content-Length: 5\r\n\r\n{oops", "not valid JSON"),
        (b"Content-Length: 2\r\n\r\n\xff\xfe", "not valid JSON"),
        (b"Content-Length: 2\r\n\r\n[]", "not a message object"),
        (b'Content-Length: 9\r\n\r\n{"seq":1}', "not a message object"),
    ],
)
async def test_malformed_input_is_a_clear_protocol_error(raw: bytes, words: str) -> None:
    # No EOF after the bad frame: the error must come from parsing, not from the stream ending.
    with pytest.raises(DapProtocolError, match=words):
        await asyncio.wait_for(read_message(feed(raw, eof=False)), 1)


async def test_header_without_end_is_bounded() -> None:
    reader = asyncio.StreamReader(limit=1024)
    reader.feed_data(b"X" * 4096)
    with pytest.raises(DapProtocolError, match="too long"):
        await asyncio.wait_for(read_message(reader), 1)


@pytest.mark.parametrize(
    ("raw", "words"),
    [(b"Content-Len", "inside a message header"), (b"Content-Length: 10\r\n\r\n{}", "10-byte")],
)
async def test_eof_inside_a_message(raw: bytes, words: str) -> None:
    with pytest.raises(DapConnectionLost, match=words) as info:
        await asyncio.wait_for(read_message(feed(raw)), 1)
    assert not isinstance(info.value, DapProtocolError)
