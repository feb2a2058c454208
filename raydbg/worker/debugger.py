"""debugpy inside a worker: start it on loopback once, suspend a thread, trace only while attached."""

from __future__ import annotations

import logging
import os
import sys
import threading
import time
from types import FrameType, TracebackType
from typing import Any

log = logging.getLogger("raydbg.worker")

ExcInfo = tuple[type[BaseException], BaseException, TracebackType]

_lock = threading.Lock()
_port: int | None = None
_tracing = False
_paused_threads: set[int] = set()


class _Requests:
    """Counts DAP requests pydevd processes: tells an unseen stop from one the client handled."""

    handled = 0  # every request but disconnect
    detaches = 0


def _count_requests() -> None:
    # The reader thread binds this method when debugpy starts: patch the class before listen().
    import json

    from _pydevd_bundle.pydevd_process_net_command_json import PyDevJsonCommandProcessor

    original = PyDevJsonCommandProcessor.process_net_command_json
    if getattr(original, "_raydbg", False):
        return

    def process(self: Any, py_db: Any, json_contents: Any, send_response: bool = True) -> Any:
        try:
            command = json.loads(json_contents).get("command")
        except Exception:
            command = None
        if command == "disconnect":
            _Requests.detaches += 1
        else:
            _Requests.handled += 1
        return original(self, py_db, json_contents, send_response)

    process._raydbg = True  # type: ignore[attr-defined]
    PyDevJsonCommandProcessor.process_net_command_json = process  # type: ignore[method-assign]


def ensure_listening(host: str = "127.0.0.1") -> int:
    """Start debugpy in process (pydevd owns the loopback port) once per process; return the port."""
    global _port
    with _lock:
        if _port is not None:
            return _port
        # Frozen stdlib modules are fine for us; pydevd's warning about them is noise.
        os.environ.setdefault("PYDEVD_DISABLE_FILE_VALIDATION", "1")
        # Importing pydevd installs its own sys.breakpointhook: keep ours.
        ours = sys.breakpointhook
        import debugpy
        import debugpy.server  # noqa: F401  (puts pydevd on sys.path)
        import pydevd  # noqa: F401

        _count_requests()
        # Child processes of a worker are not ours to debug; keep debugpy out of them.
        debugpy.configure(subProcess=False)
        # In-process adapter: no adapter subprocess (~750 ms) and per-thread `continue`
        # reaches pydevd (the separate adapter rewrites every continue to "all threads").
        _, _port = debugpy.listen((host, 0), in_process_debug_adapter=True)
        sys.breakpointhook = ours
        # listen() turns tracing on in every thread: the worker would run ~2x slower
        # for the rest of its life. Trace only while a client is attached.
        _untrace_all()
        _start_watcher()
        return _port


def _py_db() -> Any:
    import pydevd

    return pydevd.get_global_debugger()


def client_attached() -> bool:
    py_db = _py_db()
    return bool(py_db is not None and py_db.is_attached())


def _trace_on() -> None:
    global _tracing
    py_db = _py_db()
    py_db.patch_threads()
    py_db.enable_tracing(py_db.trace_dispatch, apply_to_all_threads=True)
    py_db.set_tracing_for_untraced_contexts()
    _tracing = True


def _remove_own_trace(frame: FrameType, event: str, arg: Any) -> None:
    # Installed in every thread by _untrace_all: the thread's next call removes it.
    import pydevd_tracing

    pydevd_tracing.SetTrace(None)
    return None


def _untrace_all() -> None:
    global _tracing
    import pydevd_tracing
    from _pydev_bundle.pydev_monkey import undo_patch_thread_modules

    threading.settrace(None)  # type: ignore[arg-type]
    undo_patch_thread_modules()
    pydevd_tracing.set_trace_to_threads(_remove_own_trace)
    for top in sys._current_frames().values():
        frame: FrameType | None = top
        while frame is not None:
            frame.f_trace = None
            frame = frame.f_back
    _tracing = False


def _watch() -> None:
    """Turn tracing off once no client is attached and no thread is paused."""
    while True:
        time.sleep(0.1)
        try:
            with _lock:
                if _tracing and not _paused_threads and not client_attached():
                    _untrace_all()
        except Exception:  # never let the watcher die silently mid-session
            log.exception("raydbg: tracing watcher error")


def _start_watcher() -> None:
    t = threading.Thread(target=_watch, name="raydbg-trace-watcher", daemon=True)
    # pydevd must neither trace nor list this thread.
    t.pydev_do_not_trace = True  # type: ignore[attr-defined]
    t.is_pydev_daemon_thread = True  # type: ignore[attr-defined]
    t.start()


def wait_for_client(timeout: float | None, poll: float = 0.02) -> bool:
    deadline = None if timeout is None else time.monotonic() + timeout
    while not client_attached():
        if deadline is not None and time.monotonic() >= deadline:
            return False
        time.sleep(poll)
    return True


def suspend(frame: FrameType, exc_info: ExcInfo | None = None) -> bool:
    """Stop this thread in `frame` (the user's line, or the raising frame) until resumed.

    Returns False when the client detached without ever handling this stop (it came
    between its `continue` and its `disconnect`): the caller waits for the next client
    instead of skipping the user's breakpoint (Ray's built-in skips it).
    """
    from _pydevd_bundle.pydevd_additional_thread_info import set_additional_thread_info
    from _pydevd_bundle.pydevd_comm_constants import CMD_SET_BREAK

    thread = threading.current_thread()
    with _lock:
        _paused_threads.add(thread.ident or 0)
        if not _tracing:
            _trace_on()
    try:
        py_db = _py_db()
        info = set_additional_thread_info(thread)
        info.is_tracing += 1  # keep pydevd's tracer out of our own frames
        handled, detaches = _Requests.handled, _Requests.detaches
        try:
            py_db.set_trace_for_frame_and_parents(thread.ident, frame)
            if exc_info is not None:
                info.pydev_message = exc_info[0].__name__
                frames_byid = {}
                tb: TracebackType | None = exc_info[2]
                while tb is not None:
                    frames_byid[id(tb.tb_frame)] = tb.tb_frame
                    tb = tb.tb_next
                # Direct stop: whatever exception filters the client sent.
                py_db.do_stop_on_unhandled_exception(thread, frame, frames_byid, exc_info)
            else:
                py_db.set_suspend(thread, CMD_SET_BREAK)
                py_db.do_wait_suspend(thread, frame, "line", None)
        finally:
            info.is_tracing -= 1
        return not (_Requests.detaches != detaches and _Requests.handled == handled)
    finally:
        with _lock:
            _paused_threads.discard(thread.ident or 0)
