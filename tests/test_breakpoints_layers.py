"""The arming layers on real code (no Ray): sys.monitoring on 3.12+, the settrace fallback on 3.11.

Each test arms lines of the functions below, runs them, and checks which lines were hit
in which frame: armed lines only, conditions, code defined after arming, a frame that
was already running, disarming.
"""

from __future__ import annotations

import logging
import sys
import threading
import time
from collections.abc import Iterator
from types import FrameType
from typing import Any

import pytest

from raydbg.breakpoints import model
from raydbg.breakpoints.worker import Armed, Arming

HERE = __file__


def line_of(marker: str) -> int:
    with open(HERE) as f:
        for n, text in enumerate(f, 1):
            if text.rstrip().endswith(f"# {marker}") and "line_of(" not in text:
                return n
    raise AssertionError(marker)


def loop(n: int) -> int:
    total = 0
    for i in range(n):
        total += i  # LOOP
    if n < 0:
        total = -1  # NEVER
    return total


def helper(x: int) -> int:
    return x + 1  # HELPER


def arming(*specs: tuple[int, str | None]) -> Arming:
    out = {}
    for line, cond in specs:
        bp = model.checked({"file": HERE, "line": line, "condition": cond})
        out[bp.id] = Armed(bp)
    return Arming(out)


def layers() -> list[str]:
    # On 3.12+ the fallback is never used (debugpy's own tracing there is sys.monitoring).
    return ["monitoring"] if sys.version_info >= (3, 12) else ["settrace"]


class Recorder:
    def __init__(self) -> None:
        self.hits: list[tuple[int, dict[str, Any], str]] = []

    def __call__(self, armed: list[Armed], frame: FrameType) -> None:
        for a in armed:
            if a.true_in(frame):
                self.hits.append((frame.f_lineno, dict(frame.f_locals), a.bp.id))


@pytest.fixture(params=layers())
def layer(request: pytest.FixtureRequest) -> Iterator[tuple[Any, Recorder]]:
    rec = Recorder()
    if request.param == "monitoring":
        from raydbg.breakpoints.monitoring import MonitoringLayer

        lay: Any = MonitoringLayer(rec)
    else:
        from raydbg.breakpoints.settrace import SettraceLayer

        lay = SettraceLayer(rec)
    yield lay, rec
    lay.close()  # disarmed, and sys.monitoring's tool id given back for the next test
    sys.settrace(None)


def test_armed_line_only_and_condition(layer: tuple[Any, Recorder]) -> None:
    lay, rec = layer
    lay.apply(arming((line_of("LOOP"), "i % 2 == 1"), (line_of("NEVER"), None)))
    assert loop(6) == 15
    assert [(line, loc["i"]) for line, loc, _ in rec.hits] == [(line_of("LOOP"), i) for i in (1, 3, 5)]
    assert helper(1) == 2 and len(rec.hits) == 3  # an unarmed function: nothing


def test_bad_condition_is_an_error_not_a_crash(layer: tuple[Any, Recorder]) -> None:
    lay, rec = layer
    arm = arming((line_of("HELPER"), "undefined_name > 1"))
    lay.apply(arm)
    assert helper(1) == 2 and rec.hits == []
    (a,) = arm.armed.values()
    assert a.error and "NameError" in a.error and "\n" not in a.error


def test_a_condition_that_raises_is_logged_once(layer: tuple[Any, Recorder],
                                                caplog: pytest.LogCaptureFixture) -> None:
    lay, rec = layer
    arm = arming((line_of("HELPER"), "1 / (x - x) > 0"))
    lay.apply(arm)
    with caplog.at_level(logging.WARNING, logger="raydbg.breakpoints"):
        assert [helper(i) for i in range(5)] == [1, 2, 3, 4, 5] and rec.hits == []
    raised = [r for r in caplog.records if "ZeroDivisionError" in r.getMessage()]
    assert len(raised) == 1, caplog.text  # five hits, one line in the worker's log
    (a,) = arm.armed.values()
    assert a.error and "ZeroDivisionError" in a.error


@pytest.mark.skipif(sys.version_info >= (3, 12), reason="the settrace layer (3.11); 3.12's needs no reinstall")
def test_the_311_layer_comes_back_after_a_debug_session(layer: tuple[Any, Recorder]) -> None:
    from raydbg.worker import debugpy_control

    lay, rec = layer
    lay.apply(arming((line_of("HELPER"), None)))
    assert helper(1) == 2 and len(rec.hits) == 1

    def other_tracer(frame: FrameType, event: str, arg: Any) -> None:
        return None

    sys.settrace(other_tracer)  # a debug client's tracer in the layer's place
    threading.settrace(other_tracer)
    assert helper(2) == 3 and len(rec.hits) == 1  # the layer is out meanwhile
    debugpy_control._untrace_all()  # what the worker does once the session ends
    assert helper(3) == 4 and [loc["x"] for _, loc, _ in rec.hits] == [1, 3]  # back


def test_code_defined_after_arming_and_disarm(layer: tuple[Any, Recorder]) -> None:
    lay, rec = layer
    lay.apply(arming((line_of("LATE"), None)))
    namespace: dict[str, Any] = {}
    # A function whose code object appears only now (as a task function unpickled later).
    source = "\n" * (line_of("LATE") - 2) + "def late(y):\n    return y * 2\n"
    exec(compile(source, HERE, "exec"), namespace)
    assert namespace["late"](21) == 42
    assert [loc["y"] for _, loc, _ in rec.hits] == [21]
    lay.apply(Arming())
    assert namespace["late"](1) == 2 and len(rec.hits) == 1
    # the exec'd function claims the next line as its own:
    # LATE


def test_frame_running_when_armed(layer: tuple[Any, Recorder]) -> None:
    lay, rec = layer
    started, stop = threading.Event(), threading.Event()
    seen: list[int] = []

    def spin() -> None:
        started.set()
        k = 0
        while not stop.is_set():
            k += 1  # SPIN
            if rec.hits:
                seen.append(k)
                return

    t = threading.Thread(target=spin)
    t.start()
    started.wait()
    time.sleep(0.05)
    lay.apply(arming((line_of("SPIN"), None)))
    t.join(5)
    stop.set()
    assert seen and rec.hits[0][0] == line_of("SPIN")


@pytest.mark.skipif(sys.version_info < (3, 12), reason="sys.monitoring is 3.12+")
def test_monitoring_tool_is_not_debuggers() -> None:
    from raydbg.breakpoints.monitoring import MonitoringLayer

    lay = MonitoringLayer(Recorder())
    lay.apply(arming((line_of("NEVER"), None)))
    try:
        assert lay.tool not in (None, 0) and sys.monitoring.get_tool(lay.tool) == "raydbg"
        events = sys.monitoring.get_events(lay.tool)
        assert events == sys.monitoring.events.PY_START | sys.monitoring.events.PY_RESUME
        assert sys.monitoring.get_local_events(lay.tool, loop.__code__) == 0  # not called yet
        assert loop(2) == 1 and helper(1) == 2  # each reports once, at its first call
        assert sys.monitoring.get_local_events(lay.tool, loop.__code__) == sys.monitoring.events.LINE
        assert sys.monitoring.get_local_events(lay.tool, helper.__code__) == 0
        lay.apply(Arming())
        assert sys.monitoring.get_events(lay.tool) == 0
        assert sys.monitoring.get_local_events(lay.tool, loop.__code__) == 0
    finally:
        tool = lay.tool
        lay.close()
    assert lay.tool is None and sys.monitoring.get_tool(tool) is None  # the id is free again


@pytest.mark.skipif(sys.version_info < (3, 12), reason="sys.monitoring is 3.12+")
def test_no_free_tool_id_is_reported_and_nothing_pauses(monkeypatch: pytest.MonkeyPatch) -> None:
    """Other tools hold ids 3 and 4: the worker arms nothing and says why in its hit record."""
    from raydbg.breakpoints import store
    from raydbg.breakpoints import worker as armed_worker
    from raydbg.breakpoints.monitoring import TOOL_IDS, MonitoringLayer

    mon = sys.monitoring
    assert "raydbg" not in [mon.get_tool(t) for t in TOOL_IDS], "an earlier test left raydbg's tool id held"
    taken = [t for t in TOOL_IDS if mon.get_tool(t) is None]
    for t in taken:
        mon.use_tool_id(t, "someone-else")
    bp = model.checked({"file": HERE, "line": line_of("HELPER")})
    reported: list[tuple[str, int, str | None]] = []
    # The registry is not what is tested here: the worker's reaction to a layer that fails.
    monkeypatch.setattr(store, "version", lambda: b"v1")
    monkeypatch.setattr(store, "load", lambda: [bp])
    monkeypatch.setattr(store, "put_hits", lambda bp_id, who, hits, error: reported.append((bp_id, hits, error)))
    rec = Recorder()
    try:
        w = armed_worker.Worker("", "node-1", MonitoringLayer(rec))
        w.tick()
        assert helper(1) == 2 and rec.hits == []
        assert w.layer is None
        ((bp_id, hits, error),) = reported
        assert bp_id == bp.id and hits == 0
        assert error and "no free sys.monitoring tool id" in error and "\n" not in error
    finally:
        for t in taken:
            mon.free_tool_id(t)


@pytest.mark.skipif(sys.version_info < (3, 12), reason="sys.monitoring is 3.12+")
def test_a_layer_that_fails_is_closed_and_frees_its_tool_id(monkeypatch: pytest.MonkeyPatch) -> None:
    from raydbg.breakpoints import store
    from raydbg.breakpoints import worker as armed_worker
    from raydbg.breakpoints.monitoring import TOOL_IDS, MonitoringLayer

    def broken(self: Arming, code: Any) -> None:
        raise RuntimeError("boom")

    bp = model.checked({"file": HERE, "line": line_of("HELPER")})
    monkeypatch.setattr(store, "version", lambda: b"v1")
    monkeypatch.setattr(store, "load", lambda: [bp])
    monkeypatch.setattr(store, "put_hits", lambda *args: None)
    monkeypatch.setattr(armed_worker.Arming, "lines_in", broken)  # fails after the id was claimed
    w = armed_worker.Worker("", "node-1", MonitoringLayer(Recorder()))
    w.tick()
    assert w.layer is None and w.off_reason.endswith("RuntimeError: boom")
    assert [sys.monitoring.get_tool(t) for t in TOOL_IDS] == [None] * len(TOOL_IDS)


@pytest.mark.skipif(sys.version_info < (3, 12), reason="sys.monitoring is 3.12+")
def test_restart_events_only_when_a_line_is_newly_armed(monkeypatch: pytest.MonkeyPatch) -> None:
    """restart_events() is global (debugpy's DISABLEd events fire again): removals and condition
    changes re-arm without it; a newly armed line in code that already reported needs it, also
    in a new layer on a tool id a closed one held."""
    from raydbg.breakpoints.monitoring import MonitoringLayer

    restarts: list[int] = []
    real = sys.monitoring.restart_events
    monkeypatch.setattr(sys.monitoring, "restart_events", lambda: (restarts.append(1), real())[1])
    rec = Recorder()
    lay = MonitoringLayer(rec)
    try:
        lay.apply(arming((line_of("LOOP"), None), (line_of("NEVER"), None)))
        assert loop(2) == 1 and helper(1) == 2  # helper reports PY_START once: DISABLE
        assert [loc["i"] for _, loc, _ in rec.hits] == [0, 1]
        before = len(restarts)
        lay.apply(arming((line_of("LOOP"), "i == 1")))  # one removed, one condition changed
        assert len(restarts) == before
        assert loop(3) == 3 and [loc["i"] for _, loc, _ in rec.hits] == [0, 1, 1]
        lay.apply(arming((line_of("LOOP"), "i == 1"), (line_of("HELPER"), None)))
        assert len(restarts) == before + 1
        assert helper(2) == 3 and rec.hits[-1][1]["x"] == 2
    finally:
        lay.close()
    again = MonitoringLayer(rec)
    try:  # helper's DISABLE (from the closed layer's tool) outlived it: arming here restarts
        again.apply(arming((line_of("HELPER"), None)))
        assert helper(5) == 6 and rec.hits[-1][1]["x"] == 5
    finally:
        again.close()
