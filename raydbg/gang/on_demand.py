"""`raydbg pause` inside a worker (worker side): stop the thread doing the work at its next line of user code.

The stacks thread (cooperative_worker.py) calls `request()` when the node's agent asks. The thread
chosen is the one a stack class is decided by (stack_classes.main_thread: a Train rank's training
thread, else the one with the most user frames). It is armed (worker/thread_trace.py) and
stops at its next line in a frame of user code (raydbg/user_code.py's rule with this worker's
roots: the job's own package counts wherever it is installed; a generated `<string>` frame or a
library frame never does, so the thread stops once back in the user's code from them), where
it becomes an ordinary session.
A thread still in C after GRACE_S (0.25 s: a collective wait, a sleep, a lock) is listed at once
as a snapshot (its frames with their locals) and becomes the session, under the same id,
when it returns to Python. A `raydbg continue` of the snapshot disarms it and removes the
record; so does RAYDBG_WAIT_TIMEOUT, as a session nobody attached to ends, and so does a
snapshot record that cannot be read back (it would be listed by nobody and stay for ever).
"""

from __future__ import annotations

import logging
import sys
import threading
import time
from types import FrameType
from typing import TYPE_CHECKING, Any

from raydbg import config, registry
from raydbg.gang import own_threads, stack_classes
from raydbg.gang.frames import user_frames
from raydbg.worker import resume, session, thread_trace, user_roots

if TYPE_CHECKING:  # msgspec is imported where a record is written
    from raydbg.schema import SessionRecord

log = logging.getLogger("raydbg.worker")

# A thread running Python reaches its next line within microseconds once it has the CPU; on
# a loaded machine that can take a while (seen > 0.1 s at load 5 on 2 cores). Later, it is
# listed as a snapshot first and becomes the session a moment after, under the same id.
GRACE_S = 0.25
REASON = "pause"

_lock = threading.Lock()
_armed: dict[int, thread_trace.Armed] = {}  # thread ident -> its pending pause


class _Pending:
    """One requested pause: the target thread fires it, the pause thread may list a snapshot first."""

    def __init__(self, thread: threading.Thread) -> None:
        self.thread = thread
        self.lock = threading.Lock()
        self.fired = False
        self.snapshot: SessionRecord | None = None

    def fire(self, frame: FrameType) -> None:
        """In the target thread, at its stop."""
        with self.lock:
            self.fired = True
            listed = self.snapshot
        with _lock:
            _armed.pop(threading.get_ident(), None)
        if listed is not None and not registry.lookup(registry.SESSION + listed.id)[0]:
            return  # the snapshot was continued (and withdrawn) before the thread came back
        session.pause(frame, REASON, session_id=listed.id if listed else None)

    def list_snapshot(self) -> SessionRecord | None:
        """In the pause thread: list the thread as a snapshot unless it stopped meanwhile."""
        with self.lock:
            if self.fired:
                return None
            top = sys._current_frames().get(self.thread.ident or 0)
            if top is None:
                return None
            self.snapshot = session.publish_snapshot(self.thread, top, REASON)
            return self.snapshot


def request() -> dict[str, Any]:
    """Arm the work thread; the answer the agent relays: {"thread": name} or {"error": why}."""
    chosen = stack_classes.main_thread({"threads": own_threads.threads(skip_self=True)})
    # Only a thread with the user's frames, or Train's TrainingThread (about to run them), comes
    # back to a user line: one caught briefly in library code (an actor call on the main loop,
    # Train's MonitoringThread) returns to C and its snapshot would never become a session.
    if chosen is None or not (user_frames(chosen.get("frames") or []) or stack_classes.is_training_thread(chosen)):
        return {"error": "no thread of this worker runs Python work now (it waits for a task): nothing to pause"}
    if chosen.get("paused"):
        return {"error": f"thread {chosen.get('name')} is paused by raydbg already: see `raydbg list`"}
    ident = int(chosen["thread_id"])
    thread = {t.ident: t for t in threading.enumerate()}.get(ident)
    if thread is None:
        return {"error": f"thread {chosen.get('name')} has ended"}
    with _lock:
        if ident in _armed:
            return {"thread": thread.name, "pending": True}
        pending = _Pending(thread)
        roots = user_roots.current()

        def wanted(frame: FrameType) -> bool:
            return roots.is_user(frame.f_code.co_filename)

        try:
            armed = thread_trace.arm(ident, wanted, pending.fire)
        except thread_trace.NoToolId as exc:  # answered at once: the CLI prints why
            return {"error": str(exc)}
        if armed is None:
            return {"error": f"thread {thread.name} has ended"}
        _armed[ident] = armed
    watcher = threading.Thread(target=_watch, args=(pending, armed), name="raydbg-pause", daemon=True)
    watcher.pydev_do_not_trace = True  # type: ignore[attr-defined]
    watcher.is_pydev_daemon_thread = True  # type: ignore[attr-defined]
    watcher.start()
    return {"thread": thread.name}


def _watch(pending: _Pending, armed: thread_trace.Armed) -> None:
    """The pause thread: a snapshot if the thread is still in C after GRACE_S, then its end."""
    if armed.fired.wait(GRACE_S):
        return
    try:
        listed = pending.list_snapshot()
    except Exception:
        log.exception("raydbg: pause: could not list a snapshot of thread %s", pending.thread.name)
        listed = None
    if listed is None:
        return
    timeout = config.wait_timeout()
    deadline = None if timeout is None else time.monotonic() + timeout
    resume_key = resume.session_key(listed.id)
    while not armed.fired.wait(resume.poll_s()):
        try:
            still_listed, readable = registry.lookup(registry.SESSION + listed.id)
            continued = resume.requested(listed)
        except Exception:
            continue  # GCS busy: ask again next round
        expired = deadline is not None and time.monotonic() >= deadline
        if still_listed and readable is None:
            # Nobody can list or continue a record they cannot read: end the pause, leave nothing.
            log.warning("raydbg: pause: snapshot %s cannot be read back; removed, thread %s runs on",
                        listed.id, pending.thread.name)
        elif still_listed and not continued and not expired:
            continue
        # Continued (or nobody came in time) while the thread is still in C: it runs on.
        if not armed.disarm():
            return  # it came back to Python meanwhile: its session owns the record now
        with _lock:
            _armed.pop(armed.ident, None)
        if still_listed:
            session.withdraw(listed)
        if continued:
            registry.delete(resume_key)
        return
