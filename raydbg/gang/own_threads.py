"""This worker's threads as the stacks contract's dicts: id, name, paused by raydbg, idle, frames innermost first (worker side).

A frame the worker's user-code roots make the user's, where its path alone would not (the
team's trainer installed in site-packages), carries `"user": true` (raydbg/user_code.py).
"""

from __future__ import annotations

import sys
import threading
from typing import Any

from raydbg.gang.frames import Frame, looks_idle
from raydbg.worker import paused_threads, user_roots


def threads(interrupted: Any = None, skip_self: bool = False) -> list[dict[str, Any]]:
    """`interrupted`: the frame a signal handler interrupted, for the calling thread's stack;
    `skip_self`: leave the calling thread out (the stacks thread, taking the snapshot)."""
    roots = user_roots.current()
    paused = paused_threads.current()
    known = {t.ident: t for t in threading.enumerate()}
    me = threading.get_ident()
    out = []
    for ident, top in sys._current_frames().items():
        if ident == me and skip_self:
            continue
        frames: list[Frame] = []
        frame = (interrupted or top.f_back) if ident == me else top  # not our own frames
        while frame is not None:
            code = frame.f_code  # the qualified name, as py-spy gives it (Class.method)
            entry: Frame = {"function": getattr(code, "co_qualname", code.co_name), "file": code.co_filename,
                            "line": frame.f_lineno}
            if roots.adds(code.co_filename):
                entry["user"] = True
            frames.append(entry)
            frame = frame.f_back
        thread = known.get(ident)
        out.append({"thread_id": ident, "native_id": getattr(thread, "native_id", None),
                    "name": thread.name if thread else f"Thread-{ident}",
                    "paused": ident in paused, "idle": looks_idle(frames), "frames": frames})
    return out
