"""`raydbg continue` inside a paused worker: poll for a resume request, end the wait or resume pydevd.

One watcher thread per paused session polls the registry (RAYDBG_RESUME_POLL_S, default
0.5 s: one multi-get, two keys). A session still waiting for a client ends its wait as
"resumed"; a thread suspended in pydevd under an attached client is resumed as a DAP
`continue` would (with it, the other threads that stop suspended, not the other raydbg
sessions of this worker). The attached client sees the thread run and may stay or leave.

The requests are registry keys: `resume/session/<id>` for one session, `resume/group/<group>`
for every rank of a pause-all group (kept, so a rank that reaches the line after the group
was continued goes on too; pruned after RESUME_KEEP_S by the gateway's hang service).
"""

from __future__ import annotations

import json
import logging
import os
import sys
import threading
import time
from typing import TYPE_CHECKING

from raydbg import registry
from raydbg.worker import debugpy_control, paused_threads

if TYPE_CHECKING:  # msgspec is imported where a record is written
    from raydbg.schema import SessionRecord

log = logging.getLogger("raydbg.worker")

RESUME = "resume/"
RESUME_SESSION = RESUME + "session/"
RESUME_GROUP = RESUME + "group/"
RESUME_KEEP_S = 3600.0

_watchers: dict[str, _Watcher] = {}
_lock = threading.Lock()


def session_key(sid: str) -> str:
    return RESUME_SESSION + sid


def group_key(group: str) -> str:
    return RESUME_GROUP + group


def request_body() -> bytes:
    return json.dumps({"ts": time.time(), "by_pid": os.getpid()}).encode()


def request_session(sid: str) -> None:
    registry.put(session_key(sid), request_body())


def request_group(group: str) -> None:
    registry.put(group_key(group), request_body())


def prune(now: float | None = None) -> int:
    """Drop resume requests older than RESUME_KEEP_S (their sessions are long gone)."""
    now = time.time() if now is None else now
    values = registry.multi_get(registry.keys(RESUME))
    dropped = 0
    for k, raw in values.items():
        try:
            ts = float(json.loads(raw).get("ts", 0))
        except (ValueError, AttributeError):
            ts = 0.0
        if now - ts > RESUME_KEEP_S:
            registry.delete(k)
            dropped += 1
    return dropped


def poll_s() -> float:
    try:
        return max(0.05, float(os.environ.get("RAYDBG_RESUME_POLL_S", "0.5")))
    except ValueError:
        return 0.5


def requested(rec: SessionRecord) -> bool:
    """Has `raydbg continue` asked for this session (its own key, or its pause group's)?"""
    keys = [session_key(rec.id)]
    if rec.group:
        keys.append(group_key(rec.group))
    return bool(registry.multi_get(keys))


class _Watcher:
    def __init__(self, rec: SessionRecord, thread: threading.Thread) -> None:
        self.rec = rec
        self.thread = thread
        self.requested = threading.Event()
        self.stopped = threading.Event()
        t = threading.Thread(target=self._run, name=f"raydbg-resume-{rec.id}", daemon=True)
        # pydevd must neither trace nor list (nor suspend) this thread.
        t.pydev_do_not_trace = True  # type: ignore[attr-defined]
        t.is_pydev_daemon_thread = True  # type: ignore[attr-defined]
        t.start()

    def _run(self) -> None:
        interval = poll_s()
        while not self.stopped.wait(interval):
            try:
                if not self.requested.is_set() and requested(self.rec):
                    log.warning("raydbg: session %s continued by request", self.rec.id)
                    self.requested.set()
                if self.requested.is_set():
                    _resume_suspended(self.thread)
            except Exception:
                log.debug("raydbg: resume poll failed", exc_info=True)


def _resume_suspended(ours: threading.Thread) -> None:
    """If `ours` sits suspended in pydevd, run it and the threads its stop suspended."""
    if "pydevd" not in sys.modules:
        return
    from _pydevd_bundle import pydevd_utils
    from _pydevd_bundle.pydevd_additional_thread_info import set_additional_thread_info
    from _pydevd_bundle.pydevd_constants import STATE_SUSPEND
    from _pydevd_bundle.pydevd_thread_lifecycle import internal_run_thread

    if set_additional_thread_info(ours).pydev_state != STATE_SUSPEND:
        return
    # Threads of other raydbg sessions in this worker.
    others_paused = set(paused_threads.current()) - {ours.ident}
    for t in pydevd_utils.get_non_pydevd_threads():
        if t is not ours and t.ident in others_paused:
            continue  # another raydbg session: its own continue resumes it
        info = set_additional_thread_info(t)
        if info.pydev_state == STATE_SUSPEND:
            internal_run_thread(t, set_additional_thread_info)


def watch(rec: SessionRecord) -> _Watcher:
    with _lock:
        w = _watchers.get(rec.id)
        if w is None:
            w = _watchers[rec.id] = _Watcher(rec, threading.current_thread())
        w.rec = rec
        return w


def done(rec: SessionRecord) -> None:
    """The session ended: stop its watcher and drop its own resume request."""
    with _lock:
        w = _watchers.pop(rec.id, None)
    if w is not None:
        w.stopped.set()
        if w.requested.is_set():
            try:
                registry.delete(session_key(rec.id))
            except Exception:
                pass


def resumed(rec: SessionRecord) -> bool:
    w = _watchers.get(rec.id)
    return w is not None and w.requested.is_set()


def wait_for_client(rec: SessionRecord, timeout: float | None, poll: float = 0.02) -> str:
    """"attached", "resumed" (a continue request came first) or "timeout"."""
    w = watch(rec)
    deadline = None if timeout is None else time.monotonic() + timeout
    while True:
        if w.requested.is_set():
            return "resumed"
        if debugpy_control.client_attached():
            return "attached"
        if deadline is not None and time.monotonic() >= deadline:
            return "timeout"
        time.sleep(poll)

