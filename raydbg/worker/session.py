"""A debug session: publish who paused, wait for a client (or time out), remove the record."""

from __future__ import annotations

import logging
import os
import threading
import traceback
from types import FrameType

from raydbg import config, registry
from raydbg.records import SessionRecord, new_session_id
from raydbg.worker import context, debugger

log = logging.getLogger("raydbg.worker")


def build_record(frame: FrameType, reason: str, exc_info: debugger.ExcInfo | None) -> SessionRecord:
    thread = threading.current_thread()
    exception = None
    if exc_info is not None:
        exception = {
            "type": exc_info[0].__name__,
            "message": str(exc_info[1]),
            "traceback": "".join(traceback.format_exception(*exc_info)),
        }
    return SessionRecord(
        id=new_session_id(),
        pid=os.getpid(),
        thread_id=thread.ident or 0,
        thread_name=thread.name,
        file=os.path.abspath(frame.f_code.co_filename),
        line=frame.f_lineno,
        function=frame.f_code.co_name,
        reason=reason,
        exception=exception,
        cwd=context.cwd(),
        **context.ray_context(),
    )


def _publish(rec: SessionRecord) -> None:
    registry.put(registry.SESSION + rec.id, rec.to_json())


def pause(frame: FrameType, reason: str = "breakpoint", exc_info: debugger.ExcInfo | None = None) -> bool:
    """Pause this thread at `frame` for a remote client; False if nobody came in time."""
    rec = build_record(frame, reason, exc_info)
    _publish(rec)  # listed at once, before debugpy has started (~750 ms in a fresh worker)
    from raydbg.agent.lifecycle import ensure_agents_soon

    ensure_agents_soon(rec.node_id)
    try:
        host = rec.node_ip if config.compat_bind_node_ip() else "127.0.0.1"
        rec.port = debugger.ensure_listening(host)
        rec.state = "waiting"
        _publish(rec)
        timeout = config.wait_timeout()
        while True:
            if not debugger.wait_for_client(timeout):
                what = "continuing" if reason == "breakpoint" else "re-raising"
                log.warning(
                    "raydbg: no client attached to session %s within %ss (RAYDBG_WAIT_TIMEOUT); %s",
                    rec.id, timeout, what,
                )
                _event("session.timeout", rec)
                return False
            rec.state = "attached"
            _publish(rec)
            if debugger.suspend(frame, exc_info):
                return True
            rec.state = "waiting"  # the client left without seeing this stop
            _publish(rec)
    finally:
        try:
            registry.delete(registry.SESSION + rec.id)
        except Exception:
            log.exception("raydbg: could not remove session record %s", rec.id)


def _event(kind: str, rec: SessionRecord) -> None:
    try:
        registry.record_event(
            kind, f"session {rec.id} ({rec.function} at {rec.file}:{rec.line}) timed out",
            node_id=rec.node_id, session=rec.id, pid=rec.pid,
        )
    except Exception:
        pass
