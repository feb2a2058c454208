"""The worker's ways into a pause: `sys.breakpointhook`, Ray's post-mortem call and `raydbg.breakpoint()`.

The pause core is imported at the first pause, not at set-up: every worker of an
activated job installs this module, few of them pause."""

from __future__ import annotations

import logging
import sys
from types import FrameType
from typing import Any

log = logging.getLogger("raydbg.worker")


def breakpointhook(*args: Any, **kwargs: Any) -> None:
    """sys.breakpointhook in workers: pause this thread on the caller's line."""
    from raydbg.worker import session

    frame = sys._getframe(1)
    try:
        session.pause(frame, "breakpoint")
    except Exception:
        log.exception("raydbg: breakpoint() could not start a debug session; continuing")


def post_mortem() -> None:
    """Called by Ray's task-error path (RAY_DEBUG_POST_MORTEM=1) inside its except clause."""
    from raydbg.worker import session

    exc_type, exc, tb = sys.exc_info()
    if exc_type is None or exc is None or tb is None:
        return
    last = tb
    while last.tb_next is not None:
        last = last.tb_next
    try:
        session.pause(last.tb_frame, "exception", (exc_type, exc, tb))
    except Exception:
        log.exception("raydbg: post-mortem could not start a debug session")


def install() -> None:
    """Take over breakpoint() and post-mortem in this worker process."""
    # Ray sets PYTHONBREAKPOINT in workers; replacing the hook itself wins over it.
    sys.breakpointhook = breakpointhook
    from raydbg import _ray_internals

    _ray_internals.route_post_mortem(post_mortem)


def breakpoint_here(frame: FrameType, all_ranks: bool) -> None:
    """`raydbg.breakpoint()`: a raydbg session at `frame`, grouped across ranks if asked."""
    if sys.breakpointhook is not breakpointhook:
        sys.breakpointhook()  # raydbg not active here (e.g. the driver): the ordinary hook
        return
    from raydbg.worker import pause_group, session

    with pause_group.pausing_all_ranks(all_ranks):
        try:
            session.pause(frame, "breakpoint")
        except Exception:
            log.exception("raydbg: breakpoint() could not start a debug session; continuing")
