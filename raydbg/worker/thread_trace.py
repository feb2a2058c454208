"""Stop one running thread of this process at its next line: a trace on that thread alone.

`arm(ident, wanted, fire)` makes thread `ident` call `fire(frame)` (in that thread) at its
next line event in a frame for which `wanted(frame)` is true, once; a thread blocked in C
gets there when it returns to Python. Nothing else of the process is traced, except on
3.12+ while armed: there a sys.monitoring LINE event is global, and lines of other threads
pay one Python call each until the target fires or is disarmed.

Python 3.10/3.11: a trace function set on that thread through pydevd's helper (CPython has
no call for another thread's trace) and on its running frames (`f_trace`: a thread's trace
function sees line events only in frames that carry one). 3.12+: a sys.monitoring tool id
of its own (PAUSE_TOOL_IDS: not the ids armed breakpoints use, whose DISABLEd locations a
new tool on the same id would inherit); nothing is ever DISABLEd. When other tools hold
both, `arm` raises NoToolId at once, saying who holds what (the worker answers with it).
"""

from __future__ import annotations

import sys
import threading
from collections.abc import Callable
from types import FrameType
from typing import Any

PAUSE_TOOL_NAME = "raydbg-pause"
PAUSE_TOOL_IDS = (2, 5)  # the profiler's and the optimizer's by convention; taken only while armed
TOOL_IDS = range(6)  # sys.monitoring's


class NoToolId(RuntimeError):
    """The sys.monitoring tool ids a pause may take are all in use; the message says by whom."""


def _no_tool_id(mon: Any) -> NoToolId:
    users = [f"{t} by {str(name)[:40]!r}" for t in TOOL_IDS if (name := mon.get_tool(t)) is not None]
    ids = " and ".join(str(t) for t in PAUSE_TOOL_IDS)
    held = "all 6 in use" if len(users) == len(TOOL_IDS) else f"{ids}, the ones a pause may take, in use"
    return NoToolId(f"no free sys.monitoring tool id ({held}: {', '.join(users)}): cannot pause this worker")


class Armed:
    """One armed thread; `disarm()` is safe from any thread and more than once."""

    def __init__(self, ident: int, wanted: Callable[[FrameType], bool], fire: Callable[[FrameType], None]) -> None:
        self.ident = ident
        self.wanted = wanted
        self.fire = fire
        self.fired = threading.Event()
        self._lock = threading.Lock()
        self._tool: int | None = None
        self._done = False

    # -- the target thread ---------------------------------------------------------------
    def _hit(self, frame: FrameType) -> bool:
        """True when this line is the stop (then the trace is already off)."""
        if threading.get_ident() != self.ident or not self.wanted(frame):
            return False
        with self._lock:
            if self._done:
                return False
            self._done = True
        self._off()
        self.fired.set()
        self.fire(frame)
        return True

    def _trace(self, frame: FrameType, event: str, arg: Any) -> Any:
        if threading.get_ident() != self.ident or self._done:
            sys.settrace(None)  # not (or no more) the armed thread: take the trace away
            return None
        if event == "line" and self._hit(frame):
            return None
        return self._trace

    def _on_line(self, code: Any, line: int) -> Any:
        if not self._done:
            self._hit(sys._getframe(1))
        return None  # never DISABLE: the location stays live for the armed thread

    # -- arming ------------------------------------------------------------------------
    def _on(self) -> bool:
        top = sys._current_frames().get(self.ident)
        if top is None:
            return False
        if sys.version_info >= (3, 12):
            mon = sys.monitoring  # type: ignore[attr-defined,unused-ignore]
            tool = next((t for t in PAUSE_TOOL_IDS if mon.get_tool(t) is None), None)
            if tool is None:
                raise _no_tool_id(mon)
            mon.use_tool_id(tool, PAUSE_TOOL_NAME)
            mon.register_callback(tool, mon.events.LINE, self._on_line)
            mon.set_events(tool, mon.events.LINE)
            self._tool = tool
            return True
        _pydevd_tracing().set_trace_to_threads(self._trace, thread_idents=[self.ident], create_dummy_thread=False)
        frame: FrameType | None = top
        while frame is not None:
            frame.f_trace = self._trace
            frame.f_trace_lines = True
            frame = frame.f_back
        return True

    def _off(self) -> None:
        tool, self._tool = self._tool, None
        if tool is not None:
            mon = sys.monitoring  # type: ignore[attr-defined,unused-ignore]
            if mon.get_tool(tool) == PAUSE_TOOL_NAME:
                mon.set_events(tool, 0)
                mon.register_callback(tool, mon.events.LINE, None)
                mon.free_tool_id(tool)
            return
        if sys.version_info >= (3, 12):
            return
        if threading.get_ident() == self.ident:
            sys.settrace(None)
        frame = sys._current_frames().get(self.ident)
        while frame is not None:
            if frame.f_trace == self._trace:
                frame.f_trace = None
            frame = frame.f_back
        # (From another thread the thread's own trace function stays until its next event,
        # where _trace sees _done and removes itself.)

    def disarm(self) -> bool:
        """False when it had fired (or was disarmed) already."""
        with self._lock:
            if self._done:
                return False
            self._done = True
        self._off()
        return True


def arm(ident: int, wanted: Callable[[FrameType], bool], fire: Callable[[FrameType], None]) -> Armed | None:
    """Arm thread `ident` (see the module docstring); None when it has no Python frame;
    NoToolId (3.12+) when other tools hold the sys.monitoring ids a pause may take."""
    armed = Armed(ident, wanted, fire)
    return armed if armed._on() else None


def _pydevd_tracing() -> Any:
    import os

    os.environ.setdefault("PYDEVD_DISABLE_FILE_VALIDATION", "1")
    import debugpy.server  # noqa: F401  (puts pydevd on sys.path)
    import pydevd_tracing

    return pydevd_tracing
