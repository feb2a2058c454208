"""Record schemas, log escaping, text caps, event pruning, dial rules and the SSE feed (no Ray)."""

from __future__ import annotations

import asyncio
import json
import logging
from typing import Any

import pytest
from doubles import FakeGcs

from raydbg import dial, validate
from raydbg.agent import feed
from raydbg.agent.server import AgentServer
from raydbg.registry import stale_event_keys
from raydbg.schema import SessionRecord

GOOD_SESSION = SessionRecord(
    id="a1b2c3d4e5f6", job_id="01000000", pid=1234, thread_id=5, thread_name="MainThread",
    file="/x.py", line=3, function="f", reason="breakpoint", node_id="ab" * 28,
).to_dict()
GOOD_AGENT = {"node_id": "ab" * 28, "node_ip": "10.0.0.2", "port": 4242, "pid": 7, "version": "0",
              "is_head": False, "started_at": 1.0, "memory": {"used": 1, "limit": 2}, "workers": 3}
GOOD_EVENT = {"id": "0badf00d", "ts": 1.5, "kind": "memory.kill", "node_id": "n", "message": "m",
              "details": {"victim": {"pid": 3}}}


def raw(value: Any) -> bytes:
    return json.dumps(value).encode()


def test_good_records_pass_and_keep_unknown_fields() -> None:
    rec = validate.record("session", GOOD_SESSION["id"], raw({**GOOD_SESSION, "new_field": [1]}))
    assert rec["new_field"] == [1] and rec["pid"] == 1234
    assert validate.record("agent", GOOD_AGENT["node_id"], raw(GOOD_AGENT))["port"] == 4242
    assert validate.record("event", None, raw(GOOD_EVENT))["details"]["victim"]["pid"] == 3


def test_missing_optional_fields_get_their_defaults() -> None:
    minimal = {k: GOOD_SESSION[k] for k in ("id", "job_id", "pid", "thread_id", "thread_name", "file",
                                             "line", "function", "reason")}
    rec = validate.record("session", minimal["id"], raw(minimal))
    assert rec["node_id"] == "" and rec["since"] == 0.0 and rec["state"] == "starting"
    ev = validate.record("event", None, raw({"id": "x", "ts": 2, "kind": "k"}))
    assert ev["details"] == {} and ev["message"] == ""


BAD_SESSIONS = [
    b"", b"not json", b"[1, 2]", b"null", b"42", b'"text"', b"{", b"[" * 100_000,
    raw({}), raw({**GOOD_SESSION, "pid": "1234"}), raw({**GOOD_SESSION, "pid": True}),
    raw({**GOOD_SESSION, "pid": -1}), raw({**GOOD_SESSION, "pid": 10**40}),
    raw({**GOOD_SESSION, "pid": 1.5}), raw({**GOOD_SESSION, "line": None}),
    raw({**GOOD_SESSION, "id": "../../etc"}), raw({**GOOD_SESSION, "id": "x" * 200}),
    raw({**GOOD_SESSION, "since": "yesterday"}), raw({**GOOD_SESSION, "state": "hacked"}),
    raw({**GOOD_SESSION, "exception": "boom"}), raw({**GOOD_SESSION, "exception": {"message": 3}}),
    raw({**GOOD_SESSION, "train_rank": -2}), raw({**GOOD_SESSION, "file": "x" * 10_000}),
    raw({**GOOD_SESSION, "port": 70000}), raw({**GOOD_SESSION, "node_id": {"a": 1}}),
    json.dumps({**GOOD_SESSION, "since": float("nan")}).encode(),
    json.dumps({**GOOD_SESSION, "extra": float("inf")}).encode(),
    b"\xff\xfe\x00garbage", raw({**GOOD_SESSION, "pad": "x" * (validate.MAX_RECORD_BYTES + 1)}),
]


@pytest.mark.parametrize("data", BAD_SESSIONS, ids=range(len(BAD_SESSIONS)))
def test_malformed_session_records_are_refused(data: bytes) -> None:
    with pytest.raises(validate.Malformed):
        validate.record("session", GOOD_SESSION["id"], data)


def test_a_record_must_match_its_key() -> None:
    with pytest.raises(validate.Malformed, match="does not match its key"):
        validate.record("session", "ffffffffffff", raw(GOOD_SESSION))
    with pytest.raises(validate.Malformed, match="does not match its key"):
        validate.record("agent", "cd" * 28, raw(GOOD_AGENT))


@pytest.mark.parametrize("bad", [
    {"node_ip": "evil.example.com"}, {"node_ip": 3}, {"port": 0}, {"port": "80"}, {"memory": {"used": "x"}},
    {"gpus": "all"}, {"is_head": 1}, {"node_id": None},
])
def test_malformed_agent_records_are_refused(bad: dict[str, Any]) -> None:
    with pytest.raises(validate.Malformed):
        validate.record("agent", None, raw({**GOOD_AGENT, **bad}))


@pytest.mark.parametrize("bad", [{"ts": None}, {"ts": "now"}, {"details": []}, {"message": 5}, {"kind": ["k"]}])
def test_malformed_events_are_refused(bad: dict[str, Any]) -> None:
    with pytest.raises(validate.Malformed):
        validate.record("event", None, raw({**GOOD_EVENT, **bad}))


def test_escape_keeps_a_log_line_one_line() -> None:
    forged = "/api/v1/x\r\n2026-01-01 INFO raydbg: all good\x1b[2J\u2028\\"
    out = validate.escape(forged)
    assert "\r" not in out and "\n" not in out and "\x1b" not in out and "\u2028" not in out
    assert out == "/api/v1/x\\x0d\\x0a2026-01-01 INFO raydbg: all good\\x1b[2J\\u2028\\\\"
    assert validate.escape("a" * 1000, 10) == "a" * 10 + "..."


def test_refusals_are_logged_escaped(caplog: pytest.LogCaptureFixture) -> None:
    server = AgentServer("n", "127.0.0.1", "t", is_head=False)

    class Req:
        method, path, remote = "GET", "/x\r\nraydbg agent: forged\x1b[31m", "127.0.0.1"

    with caplog.at_level(logging.WARNING, logger="raydbg.agent"):
        server.refuse(Req(), "bad token")  # type: ignore[arg-type]
    (line,) = [r.getMessage() for r in caplog.records]
    assert "\n" not in line and "\x1b" not in line and "/x\\x0d\\x0araydbg agent: forged\\x1b[31m" in line


def test_cap_text_keeps_head_or_tail_and_says_so() -> None:
    assert validate.cap_text("short", 10) == "short"
    head = validate.cap_text("a" * 100 + "b" * 100, 60)
    tail = validate.cap_text("a" * 100 + "b" * 100, 60, keep="tail")
    assert len(head) <= 60 and head.startswith("a") and "characters cut" in head
    assert len(tail) <= 60 and tail.endswith("b") and "characters cut" in tail


def test_build_record_caps_exception_text() -> None:
    import sys

    from raydbg.worker.session import build_record

    def deep(n: int) -> None:
        if n == 0:
            raise ValueError("x" * 1_000_000)
        deep(n - 1)

    try:
        deep(200)
    except ValueError:
        info = sys.exc_info()
    rec = build_record(sys._getframe(), "exception", info)  # type: ignore[arg-type]
    assert rec.exception is not None
    assert len(rec.exception.message) <= validate.EXC_MESSAGE_CHARS
    assert len(rec.exception.traceback) <= validate.EXC_TRACEBACK_CHARS
    assert rec.exception.traceback.startswith("... [")  # the tail is kept, the head cut
    validate.record("session", rec.id, rec.to_json())  # what a worker writes passes the schema


def test_stale_event_keys_keep_the_newest_and_drop_the_old() -> None:
    now = 10_000_000.0
    keys = [f"event/{int((now - age) * 1000):015d}-{i:08x}" for i, age in enumerate(range(0, 50))]
    assert stale_event_keys(keys, now, keep=1000, max_age_s=1e9) == []
    newest_10 = set(keys[:10])
    assert set(stale_event_keys(keys, now, keep=10, max_age_s=1e9)) == set(keys) - newest_10
    assert set(stale_event_keys(keys, now, keep=1000, max_age_s=19.5)) == set(keys[20:])
    assert stale_event_keys(["event/garbage", "event/12-x"], now, keep=0, max_age_s=0) == []


NODE = "ab" * 28
NODES = [{"NodeID": NODE, "Alive": True, "NodeManagerAddress": "10.0.0.2"},
         {"NodeID": "cd" * 28, "Alive": False, "NodeManagerAddress": "10.0.0.3"}]


def test_dial_takes_the_address_from_ray_and_the_port_from_the_agent() -> None:
    assert dial.check(NODE, NODES, {"node_id": NODE, "node_ip": "10.0.0.2", "port": 4242}) == ("10.0.0.2", 4242)
    assert dial.relay_url("10.0.0.2", 4242, "abc") == "http://10.0.0.2:4242/api/v1/sessions/abc/dap"
    assert dial.relay_url("::1", 8080, "abc") == "http://[::1]:8080/api/v1/sessions/abc/dap"


@pytest.mark.parametrize("node, reported, why", [
    ("ef" * 28, {"node_id": "ef" * 28, "node_ip": "127.0.0.1", "port": 1}, "not in Ray's node table"),
    ("cd" * 28, {"node_id": "cd" * 28, "node_ip": "10.0.0.3", "port": 1}, "dead"),
    (NODE, None, "no raydbg agent"),
    (NODE, {"node_id": NODE, "node_ip": "127.0.0.1", "port": 4242}, "does not run at"),
    (NODE, {"node_id": "cd" * 28, "node_ip": "10.0.0.2", "port": 4242}, "does not run at"),
    (NODE, {"node_id": NODE, "node_ip": "10.0.0.2", "port": "4242"}, "no port"),
])
def test_dial_refuses_what_ray_does_not_vouch_for(node: str, reported: Any, why: str) -> None:
    with pytest.raises(dial.DialRefused, match=why):
        dial.check(node, NODES, reported)


async def test_one_poller_serves_every_sse_client_and_stops_without_them() -> None:
    # Each read waits for a permit the test hands out and returns a new list: the reads
    # made are counted (started and in flight), not the feed's own tally.
    started = in_flight = most_in_flight = 0
    permits = asyncio.Semaphore(0)

    async def fetch() -> list[dict[str, Any]]:
        nonlocal started, in_flight, most_in_flight
        started += 1
        in_flight += 1
        most_in_flight = max(most_in_flight, in_flight)
        try:
            await permits.acquire()
        finally:
            in_flight -= 1
        return [{"n": started}]

    f = feed.SessionFeed(fetch, max_clients=3, poll_s=0)
    for _ in range(3):
        f.join()
    with pytest.raises(feed.TooManyClients):
        f.join()
    seen = [-1, -1, -1]
    bodies = []
    for _ in range(3):
        permits.release()  # one read's worth
        got = await asyncio.gather(*(f.next(s, 5) for s in seen))
        seen = [v for v, _ in got]
        bodies.append({b for _, b in got})
    assert all(len(b) == 1 and None not in b for b in bodies)  # every client saw the same list
    assert len({b for bs in bodies for b in bs}) == 3  # three versions
    # One poller: one read at a time, three done and at most the fourth waiting. A poller
    # per client would have three reads in flight from the start.
    assert most_in_flight == 1 and started <= 4, (most_in_flight, started)
    for _ in range(3):
        f.leave()
    reads = started
    for _ in range(10):
        permits.release()
    for _ in range(50):  # the loop turns over many times: a live poller would read again
        await asyncio.sleep(0)
    assert started == reads and f.clients == 0  # nobody listens: nothing is read


def test_registry_reads_skip_and_count_each_bad_record_once(monkeypatch: pytest.MonkeyPatch) -> None:
    from collections import Counter

    from raydbg import registry

    monkeypatch.setattr(registry, "malformed", Counter())
    monkeypatch.setattr(registry, "_seen", type(registry._seen)())
    good = dict(GOOD_SESSION, id="a1b2c3d4e5f6")
    kv = FakeGcs({b"session/a1b2c3d4e5f6": raw(good), b"session/bad1": b"{", b"session/bad2": b"[]",
                 b"other/x": raw({"a": 1}), b"other/y": b"[1]"})
    monkeypatch.setattr(registry, "_client", kv)
    for _ in range(3):
        assert [r["id"] for r in registry.sessions()] == ["a1b2c3d4e5f6"]
    assert registry.get("session/bad1") is None and registry.get("session/a1b2c3d4e5f6") == good
    assert registry.malformed["session"] == 2  # read four times each, counted once
    kv.data[b"session/bad1"] = b"still bad, but different"
    registry.sessions()
    assert registry.malformed["session"] == 3
    assert registry.list_prefix("other/") == [{"a": 1}] and registry.malformed["other"] == 1
