"""Python 3.11: armed lines through sys.settrace (opt-in, RAYDBG_BREAK_PY311=1: every call pays a Python call).

The global trace function answers each call event; only frames whose code object holds an
armed line get the local (line) tracer. While a debug client is attached, debugpy's tracer
replaces this one; once the session ends (raydbg.worker.debugpy_control untraces every thread),
this layer is put back (debugpy_control.AFTER_UNTRACE).
"""

from __future__ import annotations

import sys
import threading
from collections.abc import Callable
from types import CodeType, FrameType
from typing import Any

Hit = Callable[[list[Any], FrameType], None]


class SettraceLayer:
    def __init__(self, hit: Hit) -> None:
        self.hit = hit
        self.arming: Any = None
        self.code: dict[CodeType, dict[int, list[Any]] | None] = {}
        self.hooked = False

    def apply(self, arming: Any) -> None:
        self.arming = arming
        self.code = {}
        if not self.hooked:
            from raydbg.worker import debugpy_control

            debugpy_control.AFTER_UNTRACE.append(self._reinstall)
            self.hooked = True
        self._install(on=bool(arming))

    def close(self) -> None:
        """Disarm everything and unhook from the debugger's untrace (a layer that is dropped)."""
        if not self.hooked:
            return
        from raydbg.worker import debugpy_control

        self.arming, self.code = None, {}
        while self._reinstall in debugpy_control.AFTER_UNTRACE:
            debugpy_control.AFTER_UNTRACE.remove(self._reinstall)
        self.hooked = False
        self._install(on=False)

    def _reinstall(self) -> None:
        if self.arming:
            self._install(on=True)

    def _install(self, on: bool) -> None:
        os_pydevd_env()
        import debugpy.server  # noqa: F401  (puts pydevd on sys.path)
        import pydevd_tracing

        threading.settrace(self._global if on else None)  # type: ignore[arg-type]
        # Every running thread (the task runs in the main thread, started long before).
        pydevd_tracing.set_trace_to_threads(self._global if on else _remove_own_trace,
                                            create_dummy_thread=False)
        for top in sys._current_frames().values():
            frame: FrameType | None = top
            while frame is not None:
                if on and self._lines(frame.f_code):
                    frame.f_trace = self._local
                    frame.f_trace_lines = True
                elif frame.f_trace is not None and getattr(frame.f_trace, "__self__", None) is self:
                    frame.f_trace = None
                frame = frame.f_back

    def _lines(self, code: CodeType) -> dict[int, list[Any]] | None:
        try:
            return self.code[code]
        except KeyError:
            lines = self.arming.lines_in(code) if self.arming else None
            self.code[code] = lines
            return lines

    def _global(self, frame: FrameType, event: str, arg: Any) -> Any:
        if event == "call" and self._lines(frame.f_code):
            return self._local
        return None

    def _local(self, frame: FrameType, event: str, arg: Any) -> Any:
        if event == "line":
            lines = self._lines(frame.f_code)
            armed = lines.get(frame.f_lineno) if lines else None
            if armed:
                self.hit(armed, frame)
                if frame.f_trace is not self._local:
                    return None  # debugpy traces this frame now (stepping): keep its tracer
        return self._local


def _remove_own_trace(frame: FrameType, event: str, arg: Any) -> None:
    sys.settrace(None)  # a thread's next call takes the layer away
    return None


def os_pydevd_env() -> None:
    import os

    os.environ.setdefault("PYDEVD_DISABLE_FILE_VALIDATION", "1")
