"""The real gateway against hostile input: garbage KV records, fuzzed HTTP and WebSocket clients.

One real Ray cluster for the module (real GCS, the real gateway agent). Afterwards the
gateway must still serve a good client: a real attach through the relay to a paused task.
"""

from __future__ import annotations

import asyncio
import json
import os
import socket
import time
from collections.abc import Iterator
from typing import Any

import aiohttp
import pytest
import ray
import tui_targets
from cluster import ENV, Cluster
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from e2e.conftest import inspect_paused
from raydbg import registry
from raydbg.client import Gateway
from raydbg.dap import open_websocket

pytestmark = pytest.mark.e2e

FUZZ = settings(max_examples=150, deadline=None, suppress_health_check=list(HealthCheck))


@pytest.fixture(scope="module")
def cluster() -> Iterator[tuple[Cluster, Gateway]]:
    with Cluster(num_cpus=2, env=dict(ENV), by_value=(tui_targets,)) as c:
        yield c, c.up()


def dead_pid() -> int:
    pid = os.fork()
    if pid == 0:
        os._exit(0)
    os.waitpid(pid, 0)
    return pid


def session_like(sid: str, node_id: str, pid: int) -> dict[str, Any]:
    return {"id": sid, "job_id": "ff000000", "pid": pid, "thread_id": 1, "thread_name": "MainThread",
            "file": "/planted.py", "line": 1, "function": "planted", "reason": "breakpoint",
            "node_id": node_id, "state": "waiting", "since": time.time(), "attachable": True}


GOOD = session_like("a0a0a0a0a0a0", "0" * 56, 1)  # a well-formed template for the bad variants
GARBAGE_SESSIONS: dict[str, bytes] = {
    "g01": b"not json at all", "g02": b"[1, 2, 3]", "g03": b"null", "g04": b'"a string"',
    "g05": b"\xff\xfe\x00\x01", "g06": b"{" * 50_000, "g07": b'{"id": "g07"}',
    "g08": json.dumps({**GOOD, "id": "g08", "pid": "123"}).encode(),
    "g09": json.dumps({**GOOD, "id": "g09", "since": float("nan")}).encode(),
    "g10": json.dumps({**GOOD, "id": "g10", "line": None}).encode(),
    "g11": json.dumps({**GOOD, "id": "someone-else"}).encode(),  # id does not match the key
    "g12": json.dumps({**GOOD, "id": "g12", "exception": "boom"}).encode(),
    "g13": json.dumps({**GOOD, "id": "g13", "pid": 10**30}).encode(),
    "g14": json.dumps({**GOOD, "id": "g14", "node_id": ["x"]}).encode(),
    "g15": json.dumps({**GOOD, "id": "g15", "pad": "x" * (1024 * 1024 + 10)}).encode(),
    "g16": json.dumps({**GOOD, "id": "g16", "state": 7}).encode(),
}
GARBAGE_AGENTS: dict[str, bytes] = {
    "a1" * 28: b"{{{{", "a2" * 28: b"[]",
    "a3" * 28: json.dumps({"node_id": "a3" * 28, "node_ip": "not an ip", "port": 1}).encode(),
    "a4" * 28: json.dumps({"node_id": "a4" * 28, "node_ip": "10.1.1.1", "port": "80"}).encode(),
    "a5" * 28: json.dumps({"node_id": "a5" * 28, "node_ip": "10.1.1.1", "port": 80, "memory": 5}).encode(),
}
GARBAGE_EVENTS: dict[str, bytes] = {
    f"{int(time.time() * 1000):015d}-bad1": b"garbage",
    f"{int(time.time() * 1000):015d}-bad2": b'{"id": "bad2", "ts": "yesterday", "kind": "x"}',
    f"{int(time.time() * 1000):015d}-bad3": b'{"id": "bad3", "ts": 1, "kind": "x", "details": [1]}',
    "not-even-a-timestamp": b"42",
}
GET_ENDPOINTS = ["/api/v1/status", "/api/v1/sessions", "/api/v1/nodes", "/api/v1/events", "/api/v1/agents",
                 "/api/v1/groups", "/api/v1/progress", "/api/v1/stacks", "/metrics"]


async def get(gw: Gateway, path: str) -> tuple[int, Any]:
    async with aiohttp.ClientSession() as http:
        async with http.get(gw.url(path), headers=gw.headers, timeout=aiohttp.ClientTimeout(total=30)) as r:
            body = await r.read()
            return r.status, (json.loads(body) if r.content_type == "application/json" else body)


async def first_sse(gw: Gateway) -> list[dict[str, Any]]:
    async with aiohttp.ClientSession() as http:
        async with http.get(gw.url("/api/v1/stream"), headers=gw.headers,
                            timeout=aiohttp.ClientTimeout(total=30)) as r:
            assert r.status == 200
            async for line in r.content:
                if line.startswith(b"data: "):
                    return list(json.loads(line[6:]))
    raise AssertionError("no SSE event")


def test_garbage_records_are_skipped_counted_and_the_collector_goes_on(cluster: tuple[Cluster, Gateway]) -> None:
    c, gw = cluster
    head = c.head_node_id()
    for sid, raw in GARBAGE_SESSIONS.items():
        registry.put(registry.SESSION + sid, raw)
    for node, raw in GARBAGE_AGENTS.items():
        registry.put(registry.AGENT + node, raw)
    for key, raw in GARBAGE_EVENTS.items():
        registry.put(registry.EVENT + key, raw)
    good_event = registry.record_event("test.good", "a good event among garbage")
    # A well-formed record of a worker that is gone: the collector must still remove it.
    doomed = session_like("d00d00d00d00", head, dead_pid())
    registry.put(registry.SESSION + doomed["id"], doomed)

    for path in GET_ENDPOINTS:
        status, body = asyncio.run(get(gw, path))
        assert status == 200, (path, status, body)
    status, sessions = asyncio.run(get(gw, "/api/v1/sessions"))
    assert all(s["id"] not in GARBAGE_SESSIONS for s in sessions)
    assert asyncio.run(get(gw, "/api/v1/sessions/g08"))[0] == 404  # malformed: as if absent
    status, events = asyncio.run(get(gw, "/api/v1/events?limit=1000"))
    assert good_event["id"] in {e["id"] for e in events}
    assert not {"bad1", "bad2", "bad3"} & {e["id"] for e in events}
    agents = asyncio.run(get(gw, "/api/v1/agents"))[1]
    assert [a["node_id"] for a in agents] == [head]
    asyncio.run(first_sse(gw))
    listed = c.cli("list", "--json")
    assert listed.returncode == 0, listed.stderr

    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        if registry.get(registry.SESSION + doomed["id"]) is None:
            break
        time.sleep(0.2)
    else:
        raise AssertionError("the collector did not remove the dead worker's session")
    events = asyncio.run(get(gw, "/api/v1/events?limit=1000"))[1]
    assert any(e["kind"] == "session.collected" and e["details"].get("session") == doomed["id"] for e in events)

    counts = asyncio.run(get(gw, "/api/v1/status"))[1]["malformed_records"]
    # Each distinct bad record counts once, however often it is read.
    assert counts["session"] == len(GARBAGE_SESSIONS), counts
    assert counts["agent"] == len(GARBAGE_AGENTS), counts
    assert counts["event"] == len(GARBAGE_EVENTS), counts


# --- HTTP fuzz: raw bytes on a socket, so nothing client-side tidies the request ------------
def raw_request(address: str, data: bytes, timeout: float = 10.0, half_close: bool = True) -> bytes:
    """`data` on a fresh connection; the answer's first bytes. With `half_close` the request
    ends there (aiohttp then often closes without answering bytes it cannot parse)."""
    host, port = address.rsplit(":", 1)
    with socket.create_connection((host, int(port)), timeout=timeout) as s:
        s.sendall(data)
        if half_close:
            s.shutdown(socket.SHUT_WR)
        out = b""
        try:
            while len(out) < 65536 and b"\r\n" not in out:
                chunk = s.recv(4096)
                if not chunk:
                    break
                out += chunk
        except TimeoutError:
            raise AssertionError(f"no answer within {timeout}s to {data[:80]!r}") from None
        return out


path_text = st.text(st.characters(codec="utf-8"), max_size=40)
paths = st.one_of(
    st.sampled_from([*GET_ENDPOINTS, "/api/v1/sessions/", "/api/v1/sessions/%2e%2e/dap", "/", "//"]),
    st.builds(lambda a, b: f"/api/v1/sessions/{a}{b}", path_text, st.sampled_from(["", "/dap", "/continue"])),
    st.builds(lambda q: f"/api/v1/events?limit={q}", path_text),
    st.builds(lambda q: f"/api/v1/stacks?job={q}&native={q}", path_text),
    path_text.map(lambda p: "/" + p),
)
methods = st.sampled_from(["GET", "HEAD", "PUT", "DELETE", "OPTIONS", "PATCH", "G\x00T", "POST"])


def encode_path(p: str) -> bytes:
    # Control characters stay raw (a forged-log attempt); the rest as UTF-8.
    return p.encode("utf-8", errors="surrogateescape")


@FUZZ
@given(methods, paths, st.booleans(), st.binary(max_size=200))
def test_fuzzed_http_requests_never_get_a_500_or_hang(cluster: tuple[Cluster, Gateway], method: str, path: str,
                                                      with_token: bool, junk: bytes) -> None:
    _, gw = cluster
    if method == "POST" and "/continue" in path:
        method = "GET"  # never continue a real session by chance
    head = f"{method} ".encode() + encode_path(path) + b" HTTP/1.1\r\nHost: x\r\nConnection: close\r\n"
    if with_token:
        head += f"Authorization: Bearer {gw.token}\r\n".encode()
    answer = raw_request(gw.address, head + b"X-Junk: " + junk.replace(b"\n", b"") + b"\r\n\r\n")
    if answer:  # aiohttp may simply close on bytes that are not HTTP
        status = answer.split(b" ", 2)[1] if answer.startswith((b"HTTP/1.1 ", b"HTTP/1.0 ")) else b"?"
        assert status.isdigit() and not status.startswith(b"5") or status == b"503", answer[:200]


REFUSED = (b"HTTP/1.0 400 ", b"HTTP/1.1 400 ")


@FUZZ
@given(st.binary(min_size=1, max_size=3000))
def test_bytes_that_are_not_http_are_refused(cluster: tuple[Cluster, Gateway], data: bytes) -> None:
    answer = raw_request(cluster[1].address, data)
    # Refused: a 400, or the connection closed without an answer; never served.
    assert not answer or answer.startswith(REFUSED), answer[:200]


# --- WebSocket fuzz, then a good client --------------------------------------------------
ws_frames = st.lists(st.one_of(st.binary(max_size=5000).map(lambda b: ("bytes", b)),
                               st.text(max_size=500).map(lambda t: ("str", t)),
                               st.sampled_from([("bytes", b"Content-Length: 99999999999\r\n\r\n"),
                                                ("bytes", b"Content-Length: 5\r\n\r\n[[[[["),
                                                ("bytes", b"\r\n\r\n"), ("str", "Content-Length: x\r\n\r\n")])),
                     min_size=1, max_size=6)


async def ws_fuzz_one(gw: Gateway, sid: str, frames: list[tuple[str, Any]], close_code: int) -> None:
    async with aiohttp.ClientSession() as http:
        try:
            ws = await http.ws_connect(gw.url(f"/api/v1/sessions/{sid}/dap"), headers=gw.headers,
                                       timeout=aiohttp.ClientWSTimeout(ws_close=5))
        except aiohttp.WSServerHandshakeError as exc:
            assert exc.status in (404, 409), exc.status
            return
        try:
            for kind, data in frames:
                await (ws.send_bytes(data) if kind == "bytes" else ws.send_str(data))
        except (ConnectionError, RuntimeError):
            pass
        await asyncio.wait_for(ws.close(code=close_code), 10)


@FUZZ
@given(ws_frames, st.sampled_from([1000, 1001, 3000, 4409, 4999]), st.sampled_from(["live", "absent", "junk"]))
def test_fuzzed_websocket_clients_never_break_the_relay(cluster: tuple[Cluster, Gateway], paused: dict[str, Any],
                                                        frames: list[tuple[str, Any]], code: int, which: str) -> None:
    sid = {"live": paused["id"], "absent": "0123456789ab", "junk": "%0d%0a..%2f"}[which]
    asyncio.run(asyncio.wait_for(ws_fuzz_one(cluster[1], sid, frames, code), 30))


async def close_code_after(gw: Gateway, sid: str, size: int) -> int | None:
    """Send one message of `size` bytes; the close code the relay answered with."""
    async with aiohttp.ClientSession() as http:
        ws = await http.ws_connect(gw.url(f"/api/v1/sessions/{sid}/dap"), headers=gw.headers)
        receiving = asyncio.ensure_future(ws.receive())  # reads the close frame while we send
        try:
            await ws.send_bytes(b"\0" * size)
        except ConnectionError:
            pass  # the relay hung up mid-message, after its close frame
        msg = await asyncio.wait_for(receiving, 30)
        assert msg.type in (aiohttp.WSMsgType.CLOSE, aiohttp.WSMsgType.CLOSED, aiohttp.WSMsgType.CLOSING), msg
        return ws.close_code


def pause_scaled_sum(gw: Gateway, besides: tuple[str, ...] = ()) -> dict[str, Any]:
    """A task paused at scaled_sum's breakpoint (a session not in `besides`), with its ref."""
    ref = ray.remote(tui_targets.scaled_sum).remote([1, 2, 3], 10)
    deadline = time.monotonic() + 90
    while time.monotonic() < deadline:
        recs = [r for r in asyncio.run(gw.sessions())
                if r["function"] == "scaled_sum" and r["attachable"] and r["id"] not in besides]
        if recs:
            return {**recs[0], "ref": ref}
        time.sleep(0.1)
    raise AssertionError("no paused scaled_sum")


@pytest.fixture(scope="module")
def paused(cluster: tuple[Cluster, Gateway]) -> dict[str, Any]:
    """The fuzz tests' target: left paused (they never continue it), whatever runs before or after."""
    return pause_scaled_sum(cluster[1])


def test_a_message_over_the_dap_cap_is_refused(cluster: tuple[Cluster, Gateway], paused: dict[str, Any]) -> None:
    # Just under the cap: taken whole, then refused by the reframer as not DAP (1003).
    assert asyncio.run(close_code_after(cluster[1], paused["id"], 63 * 2**20)) == aiohttp.WSCloseCode.UNSUPPORTED_DATA
    # Over it: aiohttp refuses the message itself (1009; or the peer hangs up mid-send, 1006),
    # and it never reaches the reframer (no 1003): with no cap it would have.
    assert asyncio.run(close_code_after(cluster[1], paused["id"], 65 * 2**20)) in (
        aiohttp.WSCloseCode.MESSAGE_TOO_BIG, aiohttp.WSCloseCode.ABNORMAL_CLOSURE)


def test_after_all_that_a_good_client_attaches_and_the_task_finishes(
        cluster: tuple[Cluster, Gateway], paused: dict[str, Any]) -> None:
    gw = cluster[1]
    mine = pause_scaled_sum(gw, besides=(paused["id"],))  # its own: the fuzz tests keep theirs

    async def good_attach() -> Any:
        streams = await open_websocket(gw.url(f"/api/v1/sessions/{mine['id']}/dap"), gw.token)
        return (await inspect_paused(*streams, "scaled"))["value"]

    assert asyncio.run(good_attach()) == "[10, 20, 30]"
    assert ray.get(mine["ref"], timeout=60) == 70


def test_bytes_that_are_not_http_are_counted(cluster: tuple[Cluster, Gateway]) -> None:
    gw = cluster[1]
    before = asyncio.run(get(gw, "/api/v1/status"))[1]["refused"].get("malformed", 0)
    assert raw_request(gw.address, b"\x16\x03\x01 not http\r\n\r\n", half_close=False).startswith(REFUSED)
    status, body = asyncio.run(get(gw, "/api/v1/status"))
    assert status == 200 and body["refused"].get("malformed", 0) == before + 1, body["refused"]


def test_old_events_are_pruned_and_the_newest_kept(cluster: tuple[Cluster, Gateway]) -> None:
    now = time.time()
    old = [f"{int((now - 8 * 86400) * 1000) + i:015d}-old{i}" for i in range(5)]
    new = [f"{int(now * 1000) + i:015d}-new{i}" for i in range(5)]
    odd = "not-even-a-timestamp-prune"  # not raydbg's key shape
    for key in [*old, *new, odd]:
        registry.put(registry.EVENT + key, {"id": key.split("-")[1], "ts": now, "kind": "test.prune"})
    registry.prune_events(keep=1000)
    left = set(registry.keys(registry.EVENT))
    assert not {registry.EVENT + k for k in old} & left  # older than 7 days: gone
    assert {registry.EVENT + k for k in new} <= left
    assert registry.EVENT + odd in left  # not raydbg's shape: left alone
    registry.prune_events(keep=2)
    mine = sorted(k for k in set(registry.keys(registry.EVENT)) if "-new" in k)
    assert mine == [registry.EVENT + k for k in new[-2:]]
