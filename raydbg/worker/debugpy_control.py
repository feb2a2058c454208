"""debugpy inside a worker: start it on loopback once, suspend a thread, trace only while attached."""

from __future__ import annotations

import logging
import os
import sys
import threading
import time
from collections.abc import Callable
from types import FrameType, TracebackType
from typing import Any

from raydbg import debug_socket
from raydbg.worker import paused_threads

log = logging.getLogger("raydbg.worker")

ExcInfo = tuple[type[BaseException], BaseException, TracebackType]

_lock = threading.Lock()
_port: int | str | None = None  # TCP port in compatibility mode
_door: debug_socket.Door | None = None
_open_pauses = 0
_tracing = False
# Called after every thread was untraced (raydbg's 3.11 breakpoint layer puts its tracer back).
AFTER_UNTRACE: list[Callable[[], None]] = []


class _Resumes:
    """Threads the client itself resumed (continue, step, goto).

    A DAP `disconnect` resumes every thread of the worker; a paused thread the client
    never resumed must pause again for the next client, not run on.
    """

    by_client: set[str] = set()  # pydevd thread ids
    all_by_client = 0  # continues of every thread ("*")
    disconnecting = threading.local()

    @classmethod
    def note(cls, thread_id: str) -> None:
        if getattr(cls.disconnecting, "on", False):
            return
        if thread_id == "*":
            cls.all_by_client += 1
        else:
            cls.by_client.add(thread_id)


# pydevd's resume entry points and where their thread id argument sits (after self).
_RESUMING = {"request_resume_thread": 0, "request_step": 1, "request_smart_step_into": 2,
             "request_smart_step_into_by_func_name": 2, "request_set_next": 2}


def _track_client_resumes() -> None:
    from _pydevd_bundle.pydevd_api import PyDevdAPI
    from _pydevd_bundle.pydevd_comm import ReaderThread

    if getattr(PyDevdAPI, "_raydbg", False):
        return

    def noting(original: Any, index: int) -> Any:
        def wrapper(self: Any, *args: Any, **kwargs: Any) -> Any:
            thread_id = args[index] if len(args) > index else kwargs.get("thread_id")
            if isinstance(thread_id, str):
                _Resumes.note(thread_id)
            return original(self, *args, **kwargs)

        return wrapper

    for name, index in _RESUMING.items():
        setattr(PyDevdAPI, name, noting(getattr(PyDevdAPI, name), index))

    original_disconnect = PyDevdAPI.request_disconnect

    def request_disconnect(self: Any, py_db: Any, resume_threads: bool) -> Any:
        _Resumes.disconnecting.on = True
        try:
            return original_disconnect(self, py_db, resume_threads)
        finally:
            _Resumes.disconnecting.on = False

    PyDevdAPI.request_disconnect = request_disconnect  # type: ignore[method-assign]

    original_close = ReaderThread._terminate_on_socket_close

    def on_socket_close(self: Any) -> None:
        # A client gone without `disconnect` (socket closed, relay dropped): end its
        # session as a disconnect would, or its paused threads stay "attached" for ever.
        if not self._kill_received and self.py_db.is_attached():
            PyDevdAPI().request_disconnect(self.py_db, resume_threads=True)
        original_close(self)

    ReaderThread._terminate_on_socket_close = on_socket_close  # type: ignore[method-assign]
    PyDevdAPI._raydbg = True  # type: ignore[attr-defined]


def _start(host: str | None) -> None:
    """Start debugpy in process once: behind the private door, or on TCP `host` (compat mode)."""
    global _port, _door
    # Frozen stdlib modules are fine for us; pydevd's warning about them is noise.
    os.environ.setdefault("PYDEVD_DISABLE_FILE_VALIDATION", "1")
    # Importing pydevd installs its own sys.breakpointhook: keep ours.
    ours = sys.breakpointhook
    import debugpy
    import debugpy.server  # noqa: F401  (puts pydevd on sys.path)
    import pydevd

    _track_client_resumes()
    # Child processes of a worker are not ours to debug; keep debugpy out of them.
    debugpy.configure(subProcess=False)
    original = pydevd.create_server_socket
    if host is None:
        _door = debug_socket.Door(debug_socket.socket_path(os.getpid()))
        door = _door
        pydevd.create_server_socket = lambda host, port: door
    try:
        # In-process adapter: no adapter subprocess (~750 ms) and per-thread `continue`
        # reaches pydevd (the separate adapter rewrites every continue to "all threads").
        _, _port = debugpy.listen((host or "127.0.0.1", 0), in_process_debug_adapter=True)
    finally:
        pydevd.create_server_socket = original
    sys.breakpointhook = ours
    # listen() turns tracing on in every thread: the worker would run ~2x slower
    # for the rest of its life. Trace only while a client is attached.
    _untrace_all()
    _start_watcher()


def open_door() -> str:
    """Let clients in while this pause lasts; the worker's private socket path."""
    global _open_pauses
    with _lock:
        if _door is None and _port is None:
            _start(None)
        if _door is None:
            raise RuntimeError("raydbg: debugpy already listens on TCP (compatibility mode)")
        _open_pauses += 1
        _door.open()
        return str(_door.path)


def close_door() -> None:
    """One pause ended; the socket goes away once no thread of this worker is paused."""
    global _open_pauses
    with _lock:
        _open_pauses = max(0, _open_pauses - 1)
        if _open_pauses == 0 and _door is not None:
            _door.shut()


def listen_tcp(host: str) -> int:
    """Compatibility mode only: debugpy on TCP `host`, unauthenticated (the caller warns)."""
    with _lock:
        if _port is None and _door is None:
            _start(host)
        if _door is not None:
            raise RuntimeError("raydbg: debugpy already listens on its private socket")
        return int(_port or 0)


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
    from _pydevd_bundle.pydevd_constants import PYDEVD_USE_SYS_MONITORING

    threading.settrace(None)  # type: ignore[arg-type]
    undo_patch_thread_modules()
    if PYDEVD_USE_SYS_MONITORING:
        # 3.12+: pydevd traces through sys.monitoring (tool id 0, never raydbg's own):
        # its events off and its tool id freed; _trace_on takes it again.
        from _pydevd_sys_monitoring import pydevd_sys_monitoring

        pydevd_sys_monitoring.stop_monitoring(all_threads=True)
    else:
        pydevd_tracing.set_trace_to_threads(_remove_own_trace)
    for top in sys._current_frames().values():
        frame: FrameType | None = top
        while frame is not None:
            frame.f_trace = None
            frame = frame.f_back
    _tracing = False
    for fn in AFTER_UNTRACE:
        try:
            fn()
        except Exception:
            log.exception("raydbg: after-untrace hook failed")


def _watch() -> None:
    """Turn tracing off once no client is attached and no thread is paused."""
    while True:
        time.sleep(0.1)
        try:
            with _lock:
                if _tracing and not paused_threads.current() and not client_attached():
                    _untrace_all()
        except Exception:  # never let the watcher die silently mid-session
            log.exception("raydbg: tracing watcher error")


def _start_watcher() -> None:
    t = threading.Thread(target=_watch, name="raydbg-trace-watcher", daemon=True)
    # pydevd must neither trace nor list this thread.
    t.pydev_do_not_trace = True  # type: ignore[attr-defined]
    t.is_pydev_daemon_thread = True  # type: ignore[attr-defined]
    t.start()


def _monitoring_for_steps(py_db: Any, thread_ident: int | None, frame: FrameType) -> None:
    """3.12+: after a stop, the sys.monitoring events a step needs (pydevd turns them on only
    for its own breakpoints and pauses; without them `next` never stops again)."""
    from _pydevd_bundle.pydevd_constants import PYDEVD_USE_SYS_MONITORING

    if not PYDEVD_USE_SYS_MONITORING:
        return
    from _pydevd_sys_monitoring import pydevd_sys_monitoring

    pydevd_sys_monitoring.update_monitor_events()  # sees this thread's step command
    py_db.set_trace_for_frame_and_parents(thread_ident, frame)
    pydevd_sys_monitoring.restart_events()


def suspend(frame: FrameType, exc_info: ExcInfo | None = None) -> bool:
    """Stop this thread in `frame` (the user's line, or the raising frame) until resumed.

    Returns False when the client left (disconnect, closed socket) without resuming this
    thread itself: the caller waits for the next client instead of letting the thread run
    on (a disconnect resumes every thread; Ray's built-in skips such a breakpoint).
    """
    from _pydevd_bundle.pydevd_additional_thread_info import set_additional_thread_info
    from _pydevd_bundle.pydevd_comm_constants import CMD_SET_BREAK
    from _pydevd_bundle.pydevd_constants import get_current_thread_id

    thread = threading.current_thread()
    with _lock:
        paused_threads.add(thread.ident or 0)
        if not _tracing:
            _trace_on()
    try:
        py_db = _py_db()
        info = set_additional_thread_info(thread)
        info.is_tracing += 1  # keep pydevd's tracer out of our own frames
        pydevd_id = get_current_thread_id(thread)
        _Resumes.by_client.discard(pydevd_id)
        all_before = _Resumes.all_by_client
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
                _monitoring_for_steps(py_db, thread.ident, frame)
        finally:
            info.is_tracing -= 1
        return pydevd_id in _Resumes.by_client or _Resumes.all_by_client != all_before
    finally:
        with _lock:
            paused_threads.discard(thread.ident or 0)
