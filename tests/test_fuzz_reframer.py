"""Fuzz of the relay's DAP reframer: any split, garbage, huge lengths; no crash, no hang, no loss."""

from __future__ import annotations

import json
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from raydbg.agent.dap_rewrite import (
    MAX_BODY,
    MAX_HEADER,
    DapReframer,
    DapStreamError,
    encode,
    rewrite,
)

FUZZ = settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])

json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False, allow_infinity=False) | st.text(),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4),
    max_leaves=20,
)
messages = st.fixed_dictionaries(
    {"seq": st.integers(0, 2**31), "type": st.sampled_from(["request", "response", "event"])},
    optional={
        "command": st.sampled_from(["attach", "continue", "next", "evaluate", "initialize"]),
        "arguments": json_values,
        "body": json_values,
    },
)


def feed_in_pieces(data: bytes, cuts: list[int]) -> list[bytes]:
    reframer = DapReframer()
    out: list[bytes] = []
    points = sorted({c % (len(data) + 1) for c in cuts})
    last = 0
    for point in [*points, len(data)]:
        out += reframer.feed(data[last:point])
        last = point
    return out


def decode(frames: list[bytes]) -> list[dict[str, Any]]:
    out = []
    for frame in frames:
        header, _, body = frame.partition(b"\r\n\r\n")
        assert int(header.split(b":")[1]) == len(body)
        out.append(json.loads(body))
    return out


@FUZZ
@given(st.lists(messages, min_size=1, max_size=5), st.lists(st.integers(0, 10**6), max_size=20))
def test_whole_messages_come_out_once_and_rewritten_whatever_the_split(
    msgs: list[dict[str, Any]], cuts: list[int]
) -> None:
    data = b"".join(encode(m) for m in msgs)
    expected = [rewrite(json.loads(json.dumps(m))) for m in msgs]
    assert decode(feed_in_pieces(data, cuts)) == expected


@FUZZ
@given(st.binary(max_size=6000), st.lists(st.integers(0, 10**4), max_size=10))
def test_garbage_either_waits_or_is_refused_never_crashes(data: bytes, cuts: list[int]) -> None:
    try:
        frames = feed_in_pieces(data, cuts)
    except DapStreamError as exc:
        assert len(str(exc)) <= 100  # it becomes a WebSocket close reason
        return
    for frame in frames:  # anything let through is a whole, well-formed DAP message
        assert isinstance(decode([frame])[0], dict)


@FUZZ
@given(st.integers(MAX_BODY + 1, 10**30).map(str) | st.integers(-(10**30), -1).map(str)
       | st.just("9" * 5000) | st.sampled_from(["", "0x10", "1e3", "12abc", "\u0661\u0662"]),
       st.sampled_from(["Content-Length", "content-length", "CONTENT-LENGTH"]))
def test_lengths_out_of_bounds_are_refused_at_once(length: str, name: str) -> None:
    reframer = DapReframer()
    try:
        reframer.feed(f"{name}: {length}".encode() + b"\r\n\r\n")
    except DapStreamError:
        return
    raise AssertionError(f"length {length[:20]!r} was accepted")


@FUZZ
@given(st.sampled_from(["[", "{\"a\":"]), st.integers(10_000, 200_000))
def test_deep_nesting_is_refused_not_a_recursion_crash(opener: str, depth: int) -> None:
    body = (opener * depth).encode()
    reframer = DapReframer()
    try:
        reframer.feed(b"Content-Length: %d\r\n\r\n" % len(body) + body)
    except DapStreamError:
        return
    raise AssertionError("unbalanced deep JSON was accepted")


def test_a_header_that_never_ends_is_refused_within_its_cap() -> None:
    reframer = DapReframer()
    refused = False
    fed = 0
    try:
        while fed <= MAX_HEADER + 10:
            reframer.feed(b"X" * 100)
            fed += 100
    except DapStreamError:
        refused = True
    assert refused and fed <= MAX_HEADER + 100


def test_a_big_body_in_small_chunks_is_linear_not_quadratic() -> None:
    import time

    body = json.dumps({"seq": 1, "type": "request", "command": "evaluate",
                       "arguments": {"expression": "x" * (8 * 2**20)}}).encode()
    data = b"Content-Length: %d\r\n\r\n" % len(body) + body
    reframer = DapReframer()
    start = time.perf_counter()
    out: list[bytes] = []
    for i in range(0, len(data), 65536):
        out += reframer.feed(data[i:i + 65536])
    took = time.perf_counter() - start
    assert len(out) == 1 and took < 5, took
