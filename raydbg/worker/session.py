"""A debug session: publish who paused, wait for a client (or time out), remove the record."""

from __future__ import annotations

import logging
import os
import threading
import time
import traceback
from types import FrameType
from typing import TYPE_CHECKING

from raydbg import config, ray_context, registry
from raydbg.records import new_session_id
from raydbg.validate import EXC_MESSAGE_CHARS, EXC_TRACEBACK_CHARS, MAX_TEXT, cap_text
from raydbg.worker import (
    debugpy_control,
    listeners,
    pause_group,
    resume,
    snapshot,
    user_roots,
)

if TYPE_CHECKING:  # msgspec and the structs are imported at the first pause, not at setup
    from raydbg.schema import SessionRecord

log = logging.getLogger("raydbg.worker")


class _Metrics:
    """Created after the record is published: importing OpenTelemetry costs ~130 ms cold."""

    def __init__(self) -> None:
        from raydbg import telemetry

        telemetry.setup("worker")  # idempotent; only a pausing worker pays for it
        self.telemetry = telemetry
        self.paused = telemetry.counter("raydbg.session.paused", "{session}", "Debug sessions opened by a pause")
        self.attached = telemetry.counter("raydbg.session.attached", "{session}", "Sessions a client attached to")
        self.timed_out = telemetry.counter(
            "raydbg.session.timed_out", "{session}", "Sessions nobody attached to in time"
        )
        self.duration = telemetry.histogram(
            "raydbg.session.pause.duration", "s", "How long a thread stayed paused"
        )


_metrics: _Metrics | None = None


def metrics() -> _Metrics:
    global _metrics
    if _metrics is None:
        _metrics = _Metrics()
    return _metrics


def _safe_str(exc: BaseException) -> str:
    try:
        return str(exc)
    except Exception:  # a broken __str__ must not lose the pause
        return f"<{type(exc).__name__}: str() failed>"


def build_record(frame: FrameType, reason: str, exc_info: debugpy_control.ExcInfo | None,
                 thread: threading.Thread | None = None, session_id: str | None = None) -> SessionRecord:
    """The record of a pause of `thread` (the calling one if None) at `frame`; for an exception,
    where it shows in the user's code: the innermost traceback entry in a file of the
    user's (user_roots.focus), the raising frame when there is none."""
    from raydbg.schema import ExceptionInfo, SessionRecord

    thread = thread or threading.current_thread()
    named, line = frame, frame.f_lineno
    exception = None
    if exc_info is not None:
        # Capped: an exception's text is the user's (or an attacker's) and can be huge.
        # The traceback keeps its tail, where the raising frame is.
        exception = ExceptionInfo(
            type=cap_text(exc_info[0].__name__, 256),
            message=cap_text(_safe_str(exc_info[1]), EXC_MESSAGE_CHARS),
            traceback=cap_text("".join(traceback.format_exception(*exc_info)), EXC_TRACEBACK_CHARS, "tail"),
        )
        named, line = user_roots.focus(frame, exc_info[2])
    return SessionRecord(
        id=session_id or new_session_id(),
        pid=os.getpid(),
        thread_id=thread.ident or 0,
        thread_name=cap_text(thread.name, 256),
        # Capped as the readers check them: a record they refuse would lose the pause.
        file=cap_text(os.path.abspath(named.f_code.co_filename), MAX_TEXT, "tail"),
        line=line,
        function=cap_text(named.f_code.co_name, MAX_TEXT),
        reason=reason,
        exception=exception,
        since=time.time(),
        cwd=cap_text(ray_context.cwd(), MAX_TEXT, "tail"),
        **ray_context.ray_context(),
    )


def _publish(rec: SessionRecord) -> None:
    registry.put(registry.SESSION + rec.id, rec.to_dict())  # a dict: cut to the readers' cap


def publish_snapshot(thread: threading.Thread, top: FrameType, reason: str) -> SessionRecord:
    """List `thread`, which cannot stop now (blocked in C), as a snapshot: its frames with
    their locals."""
    rec = build_record(top, reason, None, thread=thread)
    rec.state = "snapshot"
    import msgspec

    from raydbg.schema import SnapshotFrame

    rec.frames = msgspec.convert(snapshot.frames_of(top), list[SnapshotFrame])
    _publish(rec)
    for listener in listeners.ON_PAUSE:
        listener(rec)
    return rec


def withdraw(rec: SessionRecord) -> None:
    """Remove a listed record (a snapshot whose thread will not become a session)."""
    registry.delete(registry.SESSION + rec.id)


def pause(frame: FrameType, reason: str = "breakpoint", exc_info: debugpy_control.ExcInfo | None = None,
          breakpoint_id: str | None = None, session_id: str | None = None) -> bool:
    """Pause this thread at `frame` for a remote client; False if nobody came in time.

    `breakpoint_id`: the armed breakpoint (raydbg break add) this pause is for, if any;
    `session_id`: the id to list it under (a snapshot's, which this session replaces).
    """
    rec = build_record(frame, reason, exc_info, session_id=session_id)
    rec.breakpoint_id = breakpoint_id
    pause_group.assign_group(rec)  # pause-all: one group id across the run's ranks
    _publish(rec)  # listed at once, before the debugger has started
    for listener in listeners.ON_PAUSE:
        listener(rec)
    outcome = "failed"
    try:
        _listen(rec)  # attachable as soon as possible; telemetry comes after
        m = metrics()
        m.paused.add(1, reason=reason)
        with m.telemetry.span("raydbg.session.pause", reason=reason) as span:
            span.set_attribute("raydbg.session.id", rec.id)
            try:
                outcome = _wait_and_suspend(rec, frame, reason, exc_info)
            finally:
                span.set_attribute("outcome", outcome)
                m.duration.record(time.time() - rec.since, reason=reason, outcome=outcome)
    finally:
        resume.done(rec)
        if rec.socket:
            debugpy_control.close_door()
        try:
            registry.delete(registry.SESSION + rec.id)
        except Exception:
            log.exception("raydbg: could not remove session record %s", rec.id)
    return outcome == "resumed"


def _listen(rec: SessionRecord) -> None:
    if config.compat_bind_node_ip():
        # Node IP and loopback: Ray's tooling dials the former, the relay the latter.
        rec.port = debugpy_control.listen_tcp("0.0.0.0")
        log.warning(
            "raydbg COMPATIBILITY MODE (RAYDBG_COMPAT_BIND_NODE_IP=1): the debugger of worker %s "
            "listens on %s:%s WITHOUT authentication; anyone who can reach this node can run "
            "code in this process while it is paused", rec.pid, rec.node_ip, rec.port,
        )
    else:
        rec.socket = debugpy_control.open_door()
    rec.state = "waiting"
    _publish(rec)


def _wait_and_suspend(rec: SessionRecord, frame: FrameType, reason: str,
                      exc_info: debugpy_control.ExcInfo | None) -> str:
    """Wait for clients until one resumes the thread; the outcome names how it ended."""
    timeout = config.wait_timeout()
    while True:
        waited = resume.wait_for_client(rec, timeout)  # or a `raydbg continue` request
        if waited == "resumed":
            return "resumed"
        if waited == "timeout":
            what = "continuing" if reason == "breakpoint" else "re-raising"
            log.warning(
                "raydbg: no client attached to session %s within %ss (RAYDBG_WAIT_TIMEOUT); %s",
                rec.id, timeout, what,
            )
            _record_timeout(rec)
            metrics().timed_out.add(1, reason=reason)
            return "timed_out"
        rec.state = "attached"
        _publish(rec)
        metrics().attached.add(1, reason=reason)
        if debugpy_control.suspend(frame, exc_info):
            return "resumed"
        rec.state = "waiting"  # the client left without seeing this stop
        _publish(rec)


def _record_timeout(rec: SessionRecord) -> None:
    from raydbg.schema import SessionEventDetails

    try:
        registry.record_event(
            "session.timeout", f"session {rec.id} ({rec.function} at {rec.file}:{rec.line}) timed out",
            node_id=rec.node_id, details=SessionEventDetails(session=rec.id, pid=rec.pid),
        )
    except Exception:
        pass
