"""Records are written under the readers' size cap (raydbg/record_fit.py, through registry.put),
and a record nobody can read is removed by its writer (the pause thread) or the gateway's
collector: large snapshots and hang events round-trip, no key is left behind. No Ray: the
registry runs over a dict (tests/doubles.py)."""

from __future__ import annotations

import json
import os
import sys
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from doubles import FakeGcs

from raydbg import record_fit, registry, validate
from raydbg.agent import dead_records
from raydbg.gang import hang, on_demand, stack_classes
from raydbg.schema import SessionRecord
from raydbg.worker import resume, session

CAP = validate.MAX_RECORD_BYTES


def _stored(kv: FakeGcs, key: str) -> bytes:
    return kv.data[key.encode()]


def test_a_record_under_the_cap_is_written_as_it_is() -> None:
    rec = {"id": "a", "text": "ü" * 1000, "items": list(range(100))}
    assert record_fit.fit(rec) == json.dumps(rec).encode()


def _session_of_40_frames(chars: int) -> SessionRecord:
    rec = SessionRecord(id="0123456789ab", job_id="01000000", pid=4242, thread_id=7, thread_name="MainThread",
                        file="/job/train.py", line=12, function="step", reason="pause", state="snapshot")
    rec.frames = [{"function": f"f{i}", "file": "/job/train.py", "line": i,
                   "locals": {f"v{j:02d}": "'" + "ü" * chars + f"{j}'" for j in range(30)}} for i in range(40)]
    return rec


def test_a_40_frame_session_of_30_non_ascii_locals_each_is_cut_to_fit_and_read_back(kv: FakeGcs) -> None:
    rec = _session_of_40_frames(300)  # the snapshot budget left out: the writer's cap alone
    assert len(rec.to_json()) > 2 * CAP  # ~2.2 MB as JSON (\u escapes): every reader dropped it
    registry.put(registry.SESSION + rec.id, rec.to_dict())
    raw = _stored(kv, registry.SESSION + rec.id)
    assert len(raw) <= CAP
    back = registry.get(registry.SESSION + rec.id)
    assert back is not None and [s["id"] for s in registry.sessions()] == [rec.id]
    for field in ("id", "job_id", "pid", "thread_id", "file", "line", "function", "reason", "state"):
        assert back[field] == getattr(rec, field)
    frames = back["frames"]
    assert frames[0] == rec.frames[0]  # the innermost frame whole
    assert frames[-1] == {"...": f"{41 - len(frames)} more {record_fit.NOTE}"}


def test_a_hang_event_for_4096_ranks_each_in_its_own_stack_class_stays_under_the_cap(kv: FakeGcs) -> None:
    n = 4096
    now = time.time()
    beats = [{"job_id": "01000000", "train_run": "big-run", "world_rank": r, "world_size": n, "pid": 10_000 + r,
              "node_id": f"{r % 64:056x}", "step": 1000, "ts": now - 400} for r in range(n)]
    found = hang.HangDecider(300.0).update(beats, [], now)[0]
    frames = [{"function": f"layer_{i}.forward", "file": f"/job/model/layer_{i}.py", "line": 10 + i}
              for i in range(20)]
    stacks = {
        "classes": [{"id": f"{r:010d}", "summary": f"all_reduce at layer_{r % 20}.py", "count": 1, "total": n,
                     "in_collective": True, "frames": frames,
                     "members": [{"node_id": f"{r % 64:056x}", "pid": 10_000 + r, "world_rank": r}]}
                    for r in range(n)],
        "runs": [{"run": "big-run", "world_size": n, "culprits": list(range(n)), "disagreement": [],
                  "ranks": [{"world_rank": r, "node_id": f"{r % 64:056x}", "pid": 10_000 + r, "seq": 77}
                            for r in range(n)]}],
        "errors": [],
    }
    details = dict(found, **stacks, culprits=[{"world_rank": r, "pid": 10_000 + r} for r in range(n)],
                   disagreement=[])
    assert len(json.dumps(details)) > 8 * CAP
    event = registry.record_event("hang", hang.message(found) + "; rank waits" * 20_000, **details)
    key = next(k for k in kv.data if k.startswith(registry.EVENT.encode()))
    assert len(kv.data[key]) <= CAP
    [back] = registry.events()
    assert back["id"] == event["id"] and back["kind"] == "hang"
    assert back["details"]["job_id"] == "01000000" and back["details"]["train_run"] == "big-run"
    assert back["details"]["ranks"][:3] == found["ranks"][:3]  # the head of each list is kept
    assert len(back["message"]) <= validate.MAX_LONG_TEXT
    cut = json.dumps(back["details"])
    assert record_fit.NOTE in cut


def test_a_record_whose_own_fields_alone_are_over_the_cap_is_refused_not_written(kv: FakeGcs) -> None:
    wide = {f"k{i:07d}": i for i in range(200_000)}
    with pytest.raises(record_fit.TooLarge):
        registry.put("agent/x", wide)
    assert kv.data == {}


# --- the pause thread: a 40 x 30 non-ASCII snapshot is listed, readable, and continued ---
_DEEP = ("def _deep(depth, go):\n"
         + "".join(f"    v{i:02d} = 'ü' * 300 + '{i}'\n" for i in range(28))
         + "    if depth:\n        _deep(depth - 1, go)\n    else:\n        go.wait(30)\n")
_deep_namespace: dict[str, Any] = {}
exec(compile(_DEEP, __file__, "exec"), _deep_namespace)
_deep: Callable[[int, threading.Event], None] = _deep_namespace["_deep"]


def _until(what: Callable[[], Any], timeout: float = 10.0) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        got = what()
        if got:
            return got
        time.sleep(0.02)
    raise AssertionError("timed out")


@pytest.fixture
def blocked_rank(monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[threading.Thread, threading.Event]]:
    """A thread blocked in C under 45 frames of 30 non-ASCII locals each, named like a Train rank's
    (the thread `raydbg pause` picks)."""
    monkeypatch.setenv("RAYDBG_RESUME_POLL_S", "0.05")
    monkeypatch.delenv("RAYDBG_WAIT_TIMEOUT", raising=False)
    go = threading.Event()
    thread = threading.Thread(target=_deep, args=(44, go), name=f"{stack_classes.TRAIN_THREAD_PREFIX}loop)", daemon=True)
    thread.start()
    _until(lambda: (f := sys._current_frames().get(thread.ident or 0)) is not None and f.f_code.co_name == "wait")
    yield thread, go
    go.set()
    thread.join(10)
    assert not thread.is_alive()


def test_a_paused_thread_of_40_frames_of_30_non_ascii_locals_is_listed_readable_and_continued(
        kv: FakeGcs, blocked_rank: tuple[threading.Thread, threading.Event]) -> None:
    thread, go = blocked_rank
    answer = on_demand.request()
    assert answer == {"thread": thread.name}
    rec = _until(lambda: next(iter(registry.sessions()), None))
    assert rec["state"] == "snapshot" and rec["thread_name"] == thread.name
    assert len(_stored(kv, registry.SESSION + rec["id"])) <= CAP
    shown = [f for f in rec["frames"] if f["function"] == "_deep"]
    assert shown and shown[0]["locals"]["v00"].startswith("'üü")
    assert rec["frames"][-1]["function"].endswith("more frames")
    resume.request_session(rec["id"])  # `raydbg continue`: the thread runs on, nothing is left
    _until(lambda: not kv.data)
    go.set()


def test_a_snapshot_record_that_cannot_be_read_back_is_removed_by_the_pause_thread(
        kv: FakeGcs, blocked_rank: tuple[threading.Thread, threading.Event]) -> None:
    on_demand.request()
    rec = _until(lambda: next(iter(registry.sessions()), None))
    key = registry.SESSION + rec["id"]
    kv.data[key.encode()] = b'{"id": "' + b"x" * CAP + b'"}'  # over the cap: nobody lists it
    _until(lambda: key.encode() not in kv.data)
    assert on_demand._armed == {}  # disarmed: the thread runs on when it returns


def test_the_gateway_collector_removes_session_records_nobody_can_read(kv: FakeGcs) -> None:
    good = _session_of_40_frames(1)
    good.node_id, good.pid = "n1", os.getpid()  # a live worker
    registry.put(registry.SESSION + good.id, good.to_dict())
    bad = {b"session/over-cap": b'{"id": "over-cap", "pad": "' + b"x" * CAP + b'"}',
           b"session/not-json": b"\xff\xfe", b"session/no-pid": b'{"id": "no-pid"}',
           b"session/\xff\n": b"{"}  # a key that is not UTF-8: removed as listed
    kv.data.update(bad)
    dead_records.collect("n1")  # a node agent (not the gateway) leaves them to the gateway
    assert all(k in kv.data for k in bad)
    dead_records.collect("n1", alive_nodes={"n1"})  # the gateway removes them, and says so
    assert not any(k in kv.data for k in bad)
    assert registry.get(registry.SESSION + good.id) is not None  # a live worker's record stays
    gone = sorted(e["details"]["key"] for e in registry.events() if e["kind"] == "session.collected")
    assert gone == ["session/no-pid", "session/not-json", "session/over-cap", "session/\ufffd\\x0a"]


def test_a_session_of_code_with_a_path_longer_than_the_readers_allow_is_still_read(kv: FakeGcs) -> None:
    namespace: dict[str, Any] = {}
    exec(compile("import sys\nframe = sys._getframe()", "/job/" + "d" * 5000 + ".py", "exec"), namespace)
    rec = session.build_record(namespace["frame"], "breakpoint", None)
    registry.put(registry.SESSION + rec.id, rec.to_dict())
    back = registry.get(registry.SESSION + rec.id)
    assert back is not None and back["file"].endswith("d.py") and len(back["file"]) <= validate.MAX_TEXT
