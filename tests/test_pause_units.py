"""`raydbg pause`'s parts without Ray: a thread stopped at its next line of wanted code (every
Python: the trace differs by version), safe reprs of a blocked thread's locals, target parsing."""

from __future__ import annotations

import asyncio
import glob
import os
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path
from types import FrameType
from typing import Any

import pytest

from raydbg.gang import pause_target
from raydbg.gang.pause_target import BadTarget, Target, Worker
from raydbg.worker import snapshot, thread_trace


def _loop(stop: threading.Event, seen: list[int]) -> None:
    n = 0
    while not stop.is_set():
        n += 1  # the line the loop thread stops at, or the one above
        seen.append(n) if n % 1000 == 0 else None


def _sleeper(go: threading.Event) -> str:
    go.wait(10)  # blocked in C until the test lets it go
    after = "returned"  # where it stops once back in Python
    return after


def _start(target: Any, *args: Any) -> threading.Thread:
    t = threading.Thread(target=target, args=args, daemon=True)
    t.start()
    time.sleep(0.05)
    return t


def test_a_looping_thread_stops_at_once_and_a_sleeping_one_when_it_returns() -> None:
    stop, go = threading.Event(), threading.Event()
    fired: dict[str, tuple[str, int]] = {}

    def fire(name: str) -> Any:
        def at(frame: FrameType) -> None:
            fired[name] = (frame.f_code.co_name, frame.f_lineno)
        return at

    mine = lambda frame: frame.f_code.co_filename == __file__  # noqa: E731
    looper, sleeper = _start(_loop, stop, []), _start(_sleeper, go)
    a = thread_trace.arm(looper.ident or 0, mine, fire("loop"))
    b = thread_trace.arm(sleeper.ident or 0, mine, fire("sleep"))
    assert a is not None and b is not None
    assert a.fired.wait(5) and fired["loop"][0] == "_loop"
    time.sleep(0.2)
    assert not b.fired.is_set()  # still in C: nothing fires there
    go.set()
    assert b.fired.wait(5)
    assert fired["sleep"] == ("_sleeper", _sleeper.__code__.co_firstlineno + 2)  # the line after the wait
    stop.set()
    looper.join(5)
    sleeper.join(5)


def test_a_disarmed_thread_runs_on_and_nothing_stays_traced() -> None:
    import sys

    go = threading.Event()
    sleeper = _start(_sleeper, go)
    calls: list[FrameType] = []
    armed = thread_trace.arm(sleeper.ident or 0, lambda f: True, calls.append)
    assert armed is not None
    armed.disarm()
    armed.disarm()  # twice is fine
    go.set()
    sleeper.join(5)
    assert calls == [] and not armed.fired.is_set()
    if sys.version_info >= (3, 12):
        assert sys.monitoring.get_tool(thread_trace.PAUSE_TOOL_IDS[0]) is None  # the id given back
    assert thread_trace.arm(sleeper.ident or 0, lambda f: True, calls.append) is None  # it has ended


class Slow:
    def __repr__(self) -> str:  # must never run: a user's repr may block or have effects
        raise AssertionError("__repr__ called")


class FakeTensor:
    shape = property(lambda self: (1,))  # a Python property: not read either


def test_safe_repr_renders_builtins_bounded_and_never_runs_user_code() -> None:
    assert snapshot.safe_repr(3) == "3" and snapshot.safe_repr("ab") == "'ab'"
    assert len(snapshot.safe_repr("x" * 10_000)) <= 2 * snapshot.REPR_CHARS
    assert snapshot.safe_repr([1, 2, 3]) == "[1, 2, 3]"
    assert snapshot.safe_repr(Slow()) == f"<{__name__}.Slow>"
    assert snapshot.safe_repr([1, Slow()]) == f"[1, <{__name__}.Slow>]"  # a user object in a list: its type
    assert snapshot.safe_repr(FakeTensor()) == f"<{__name__}.FakeTensor>"


def test_safe_repr_of_a_tensor_reads_shape_dtype_device_only() -> None:
    torch = pytest.importorskip("torch", reason="torch: the main suite's venv has the CPU build")
    t = torch.zeros(4, 2)
    assert snapshot.safe_repr(t) == "<torch.Tensor shape=(4, 2) dtype=torch.float32 device=cpu>"


def test_frames_of_a_blocked_thread_carry_their_locals() -> None:
    import sys

    go = threading.Event()
    sleeper = _start(_sleeper, go)
    frames = snapshot.frames_of(sys._current_frames()[sleeper.ident or 0])
    go.set()
    sleeper.join(5)
    mine = next(f for f in frames if f["function"] == "_sleeper")
    assert mine["file"] == __file__ and mine["locals"]["go"].startswith("<threading.Event")


@pytest.mark.parametrize(("text", "want"), [
    ("train-run:1", Target("rank", run="train-run", rank=1)),
    ("a:b:3", Target("rank", run="a:b", rank=3)),
    ("4242", Target("pid", pid=4242)),
    ("0a1b2c3d4e5f:4242", Target("pid", node="0a1b2c3d4e5f", pid=4242)),
    ("0123456789", Target("class", class_id="0123456789")),
    ("deadbeef01", Target("class", class_id="deadbeef01")),
])
def test_targets_parse(text: str, want: Target) -> None:
    assert pause_target.parse(text) == want


@pytest.mark.parametrize("text", ["", "run:", "run:x", "not a target", "ABCDEF0123"])
def test_bad_targets_say_what_to_give(text: str) -> None:
    with pytest.raises(BadTarget, match="give RUN:RANK, a pid, NODE:PID or a stack class id"):
        pause_target.parse(text)


BEATS = [
    {"node_id": "n1", "pid": 10, "train_run": "r", "world_rank": 0},
    {"node_id": "n1", "pid": 11, "train_run": "r", "world_rank": 1},
    {"node_id": "n2", "pid": 10, "train_run": "other", "world_rank": 0},
]


def test_a_rank_or_pid_is_found_in_the_beats_and_a_pid_on_two_nodes_is_refused() -> None:
    assert pause_target.from_beats(Target("rank", run="r", rank=1), BEATS) == Worker("n1", 11, "r", 1)
    assert pause_target.from_beats(Target("rank", run="r", rank=5), BEATS) is None
    assert pause_target.from_beats(Target("pid", node="n2", pid=10), BEATS) == Worker("n2", 10, "other", 0)
    with pytest.raises(BadTarget, match="pid 10 is on several nodes"):
        pause_target.from_beats(Target("pid", pid=10), BEATS)


def test_a_class_stands_for_its_first_member() -> None:
    report = {"classes": [{"id": "0123456789", "train_run": "r",
                           "members": [{"node_id": "n1", "pid": 11, "world_rank": 1},
                                       {"node_id": "n1", "pid": 12, "world_rank": 2}]}], "workers": []}
    assert pause_target.from_stacks(Target("class", class_id="0123456789"), report) == Worker("n1", 11, "r", 1)
    assert pause_target.from_stacks(Target("class", class_id="9999999999"), report) is None
    assert "class ids change" in pause_target.not_found(Target("class", class_id="9999999999"))


# --- 3.12+: every sys.monitoring tool id a pause may take is held by another tool --------
# This Python when it is a 3.12 (the version matrix's 3.12 entry runs with its own HOME).
PY312 = [sys.executable] if sys.version_info[:2] == (3, 12) else \
    sorted(glob.glob(os.path.expanduser("~/.pyenv/versions/3.12.*/bin/python3.12")))
REPO = str(Path(__file__).resolve().parents[1])

HELD_IDS_WORKER = textwrap.dedent(
    """
    import sys, threading, time
    sys.path.insert(0, {repo!r})
    held = {held!r}
    for tool in held:
        sys.monitoring.use_tool_id(tool, f"tool-{{tool}}")
    from raydbg.gang import cooperative_worker, stack_classes
    from raydbg.worker import thread_trace

    def work():  # user code, running: the thread a pause picks
        while True:
            time.sleep(0.001)

    threading.Thread(target=work, name=stack_classes.TRAIN_THREAD_PREFIX + "work)", daemon=True).start()
    time.sleep(0.05)
    cooperative_worker.listen()
    print("ready", flush=True)
    sys.stdin.readline()
    """
)


@pytest.mark.skipif(not PY312, reason="needs a python3.12 (~/.pyenv/versions/3.12.*)")
@pytest.mark.parametrize(("held", "why"), [
    (list(range(6)), "(all 6 in use: 0 by 'tool-0', 1 by 'tool-1', 2 by 'tool-2', 3 by 'tool-3', 4 by 'tool-4', "
                     "5 by 'tool-5')"),
    ([2, 5], "(2 and 5, the ones a pause may take, in use: 2 by 'tool-2', 5 by 'tool-5')"),
], ids=["all-six-held", "two-and-five-held"])
def test_a_worker_with_no_free_monitoring_tool_id_answers_a_pause_at_once_saying_why(
        held: list[int], why: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from raydbg.api_errors import Conflict
    from raydbg.gang import pause_service

    monkeypatch.setenv("RAYDBG_STACKS_DIR", str(tmp_path))
    script = tmp_path / "held_ids_worker.py"
    script.write_text(HELD_IDS_WORKER.format(repo=REPO, held=held))
    proc = subprocess.Popen([PY312[-1], str(script)], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
                            env={**os.environ, "RAYDBG_STACKS_DIR": str(tmp_path), "PYTHONPATH": REPO})
    try:
        assert proc.stdout is not None and proc.stdout.readline().strip() == "ready"
        started = time.monotonic()
        with pytest.raises(Conflict) as refused:
            asyncio.run(pause_service.pause_local(proc.pid))
        took = time.monotonic() - started
        assert str(refused.value) == f"pid {proc.pid}: no free sys.monitoring tool id {why}: cannot pause this worker"
        assert refused.value.status == 409 and took < 3.0, took  # not the 10 s the agent waits at most
    finally:
        proc.kill()
        proc.wait()


@pytest.mark.skipif(not PY312, reason="needs a python3.12 (~/.pyenv/versions/3.12.*)")
def test_a_free_pause_tool_id_is_taken_and_given_back() -> None:
    code = textwrap.dedent(
        f"""
        import sys, threading, time
        sys.path.insert(0, {REPO!r})
        from raydbg.worker import thread_trace
        for tool in (0, 1, 2, 3, 4):
            sys.monitoring.use_tool_id(tool, f"tool-{{tool}}")
        go = threading.Event()
        t = threading.Thread(target=lambda: go.wait(10), daemon=True)
        t.start()
        time.sleep(0.05)
        armed = thread_trace.arm(t.ident, lambda f: True, lambda f: None)
        print(sys.monitoring.get_tool(5), armed.disarm(), sys.monitoring.get_tool(5))
        """
    )
    out = subprocess.run([PY312[-1], "-c", code], capture_output=True, text=True, timeout=60)
    assert out.stdout.split() == [thread_trace.PAUSE_TOOL_NAME, "True", "None"], out.stderr
