"""This worker's user-code roots (raydbg/user_code.py's rule), computed in the worker, which knows what it runs.

The roots: the code Ray hands this worker's work to (its task functions, its actors'
classes, a Train run's loop function: each one's file and installed top-level package),
the job's working_dir (the directory the worker started in, when the job has one), the
driver script's directory (RAYDBG_DRIVER_DIR, which the activated driver hands its
workers) and RAYDBG_USER_CODE. Computed when asked (a stacks snapshot, a pause, a
post-mortem) and kept until what the worker runs changes: a few len() calls per ask.
"""

from __future__ import annotations

import os
import sys
import threading
from types import FrameType, TracebackType
from typing import Any

from raydbg import _ray_internals, user_code

_lock = threading.RLock()  # re-entered by a stacks signal handler interrupting its own thread
_start_dir: str | None = None
_cached: tuple[Any, user_code.Roots] | None = None
_working_dir: list[str | None] = []  # [the job's working_dir here, or None] once known


def note_start_dir() -> None:
    """At worker setup, before the job's code runs: where Ray started the worker (a job's
    working_dir is the directory its workers start in)."""
    global _start_dir
    try:
        _start_dir = os.getcwd()
    except OSError:
        _start_dir = None


def _job_working_dir() -> str | None:
    if _working_dir:
        return _working_dir[0]
    ray = sys.modules.get("ray")
    if ray is None or not ray.is_initialized():
        return None  # not known yet: ask again next time
    try:
        has_one = bool(ray.get_runtime_context().runtime_env.get("working_dir"))
    except Exception:
        has_one = False
    _working_dir.append(_start_dir if has_one else None)
    return _working_dir[0]


def current() -> user_code.Roots:
    """The roots now (cached while what the worker runs and the settings stay the same);
    never raises (a stacks snapshot or a pause must not fail for them: RAYDBG_USER_CODE alone)."""
    global _cached
    try:
        key = (_ray_internals.running_signature(), os.environ.get(user_code.USER_CODE_ENV, ""),
               os.environ.get(user_code.DRIVER_DIR_ENV, ""), bool(_working_dir))
        cached = _cached
        if cached is not None and cached[0] == key:
            return cached[1]
        with _lock:
            entries = user_code.entry_points(_ray_internals.running_objects())
            dirs = [d for d in (_job_working_dir(), os.environ.get(user_code.DRIVER_DIR_ENV)) if d]
            roots = user_code.roots_of(entries, dirs).merged(user_code.default_roots())
            _cached = (key, roots)
        return roots
    except Exception:
        return user_code.default_roots()


def focus(frame: FrameType, tb: TracebackType | None) -> tuple[FrameType, int]:
    """Where an exception is shown in the user's code: the innermost traceback entry in a
    file of the user's (`frame` and its line when there is none)."""
    roots = current()
    found: tuple[FrameType, int] = (frame, frame.f_lineno)
    while tb is not None:
        if roots.is_user(tb.tb_frame.f_code.co_filename):
            found = (tb.tb_frame, tb.tb_lineno)
        tb = tb.tb_next
    return found
