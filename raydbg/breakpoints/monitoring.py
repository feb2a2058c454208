"""Python 3.12+: armed lines through a sys.monitoring tool of raydbg's own (never debugpy's id 0).

While something is armed, PY_START and PY_RESUME are on globally: each code object reports
once, and only one whose file and lines hold an armed line gets LINE events (the others
return DISABLE and never report again). In such a code object every line but the armed
ones returns DISABLE after its first run, so a hot function that holds a breakpoint on a
line never reached runs at full speed. Frames already running when a breakpoint is armed
are found on the threads' stacks. With nothing armed, no event is on; close() gives the
tool id back.
"""

from __future__ import annotations

import logging
import sys
import threading
from collections.abc import Callable
from types import CodeType, FrameType
from typing import Any

log = logging.getLogger("raydbg.breakpoints")

TOOL_NAME = "raydbg"
TOOL_IDS = (4, 3)  # free by convention: 0 debugger (pydevd), 1 coverage, 2 profiler, 5 optimizer

Hit = Callable[[list[Any], FrameType], None]

# Tool ids whose events were on in this process: code objects may hold their DISABLEs
# (freeing an id does not clear them), so arming a new line there needs restart_events().
_used: set[int] = set()


def claim_tool() -> int:
    """A tool id for raydbg (the one it already holds, else a free one of TOOL_IDS)."""
    mon = sys.monitoring  # type: ignore[attr-defined,unused-ignore]
    for tool in TOOL_IDS:
        if mon.get_tool(tool) == TOOL_NAME:
            return tool
    for tool in TOOL_IDS:
        if mon.get_tool(tool) is None:
            mon.use_tool_id(tool, TOOL_NAME)
            return tool
    raise RuntimeError(f"no free sys.monitoring tool id among {TOOL_IDS}")


def release_tool(tool: int) -> None:
    """Events and callbacks off, then the id freed (3.12's free_tool_id leaves both in place)."""
    mon = sys.monitoring  # type: ignore[attr-defined,unused-ignore]
    if mon.get_tool(tool) != TOOL_NAME:
        return  # not ours (any more): leave another tool's id alone
    mon.set_events(tool, 0)
    for event in (mon.events.PY_START, mon.events.PY_RESUME, mon.events.LINE):
        mon.register_callback(tool, event, None)
    mon.free_tool_id(tool)


def _lines_of(arming: Any) -> set[tuple[str, int]]:
    return {(a.bp.file, a.bp.line) for a in arming.armed.values()} if arming else set()


class MonitoringLayer:
    def __init__(self, hit: Hit) -> None:
        self.hit = hit
        self.tool: int | None = None
        self.arming: Any = None
        self.code: dict[int, tuple[CodeType, dict[int, list[Any]]]] = {}
        self.lock = threading.Lock()
        self.failed = False  # a PY_START callback failed (logged once)

    def _setup(self) -> int:
        mon = sys.monitoring  # type: ignore[attr-defined,unused-ignore]
        tool = claim_tool()
        ev = mon.events
        mon.register_callback(tool, ev.PY_START, self._on_start)
        mon.register_callback(tool, ev.PY_RESUME, self._on_start)
        mon.register_callback(tool, ev.LINE, self._on_line)
        self.tool = tool
        return tool

    def apply(self, arming: Any) -> None:
        """Arm exactly `arming` (called from the poll thread when the breakpoints changed)."""
        mon = sys.monitoring  # type: ignore[attr-defined,unused-ignore]
        with self.lock:
            tool = self.tool if self.tool is not None else self._setup()
            old, self.code = self.code, {}
            added = bool(_lines_of(arming) - _lines_of(self.arming))
            self.arming = arming
            for code, _ in old.values():
                if not arming or not arming.lines_in(code):
                    mon.set_local_events(tool, code, 0)
            if not arming:
                mon.set_events(tool, 0)
                return
            mon.set_events(tool, mon.events.PY_START | mon.events.PY_RESUME)
            for code, _ in old.values():
                self._consider(code)  # still armed: LINE stays on, with the new lines' breakpoints
            for top in sys._current_frames().values():
                frame: FrameType | None = top
                while frame is not None:
                    self._consider(frame.f_code)
                    frame = frame.f_back
            # restart_events() is global: it re-enables every tool's DISABLEd events, debugpy's
            # too (each then fires once more). It is needed only when a line is newly armed (a
            # code object that reported PY_START and got DISABLE before must report again),
            # never on removals or condition changes, nor on this process's first arming.
            if added and tool in _used:
                mon.restart_events()
            _used.add(tool)

    def close(self) -> None:
        """Disarm everything and give the tool id back (a layer that is dropped)."""
        mon = sys.monitoring  # type: ignore[attr-defined,unused-ignore]
        with self.lock:
            tool, self.tool = self.tool, None
            old, self.code, self.arming = self.code, {}, None
            if tool is None:
                return
            if mon.get_tool(tool) == TOOL_NAME:
                for code, _ in old.values():
                    mon.set_local_events(tool, code, 0)
            release_tool(tool)

    def _consider(self, code: CodeType) -> None:
        arming = self.arming
        if not arming or id(code) in self.code:
            return
        lines = arming.lines_in(code)
        if lines and self.tool is not None:
            self.code[id(code)] = (code, lines)
            sys.monitoring.set_local_events(self.tool, code, sys.monitoring.events.LINE)  # type: ignore[attr-defined,unused-ignore]

    def _on_start(self, code: CodeType, offset: int) -> Any:
        try:
            self._consider(code)
        except Exception as exc:  # raised here, it would surface in the user's call
            if not self.failed:
                self.failed = True
                log.warning("raydbg: armed breakpoints: a code object not considered: %r", exc)
        return sys.monitoring.DISABLE  # type: ignore[attr-defined,unused-ignore]

    def _on_line(self, code: CodeType, line: int) -> Any:
        entry = self.code.get(id(code))
        if entry is None or entry[0] is not code:
            return sys.monitoring.DISABLE  # type: ignore[attr-defined,unused-ignore]
        armed = entry[1].get(line)
        if not armed:
            return sys.monitoring.DISABLE  # type: ignore[attr-defined,unused-ignore]
        self.hit(armed, sys._getframe(1))
        return None
