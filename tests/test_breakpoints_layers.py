"""The arming layers on real code (no Ray): sys.monitoring on 3.12+, the settrace fallback on 3.11.

Each test arms lines of the functions below, runs them, and checks which lines were hit
in which frame: armed lines only, conditions, code defined after arming, a frame that
was already running, disarming.
"""

from __future__ import annotations

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
    lay.apply(Arming())
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
    finally:
        lay.apply(Arming())
    assert sys.monitoring.get_events(lay.tool) == 0
    assert sys.monitoring.get_local_events(lay.tool, loop.__code__) == 0
