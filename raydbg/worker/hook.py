"""The worker_process_setup_hook raydbg installs: owns breakpoint() and post-mortem in workers."""

from __future__ import annotations

import logging
import os
import sys
from typing import Any

from raydbg import config

log = logging.getLogger("raydbg.worker")

USER_HOOK_ENV = "RAYDBG_USER_SETUP_HOOK"


def breakpointhook(*args: Any, **kwargs: Any) -> None:
    """sys.breakpointhook in workers: pause this thread on the caller's line."""
    from raydbg.worker.session import pause

    frame = sys._getframe(1)
    try:
        pause(frame, "breakpoint")
    except Exception:
        log.exception("raydbg: breakpoint() could not start a debug session; continuing")


def post_mortem() -> None:
    """Called by Ray's task-error path (RAY_DEBUG_POST_MORTEM=1) inside its except clause."""
    from raydbg.worker.session import pause

    exc_type, exc, tb = sys.exc_info()
    if exc_type is None or exc is None or tb is None:
        return
    last = tb
    while last.tb_next is not None:
        last = last.tb_next
    try:
        pause(last.tb_frame, "exception", (exc_type, exc, tb))
    except Exception:
        log.exception("raydbg: post-mortem could not start a debug session")


def install() -> None:
    """Take over breakpoint() and post-mortem in this worker process."""
    # Ray sets PYTHONBREAKPOINT in workers; replacing the hook itself wins over it.
    sys.breakpointhook = breakpointhook
    from raydbg import _ray_internals

    _ray_internals.route_post_mortem(post_mortem)
    from raydbg.gang import cooperative

    cooperative.worker_setup()  # stacks on request when py-spy cannot attach; idle otherwise


def setup_hook() -> None:
    """Entry point named in runtime_env['worker_process_setup_hook']."""
    from raydbg import compat
    from raydbg.telemetry import ray_tracing

    # First, whatever else is on: a call carrying trace context must never fail here.
    ray_tracing.worker_ready()
    # On an unsupported Ray: one line, nothing installed; breakpoint() stays Ray's.
    if config.is_active() and compat.check("worker"):
        install()
        from raydbg.worker import train

        train.install()  # Ray Train: pause-proof group timeout, progress (a post-import hook)
        from raydbg.breakpoints import worker as armed_breakpoints

        armed_breakpoints.worker_setup()  # `raydbg break add`: arms now, then polls one KV key
        from raydbg.memory import settings

        if settings.current().budgets:
            # Retry budgets of nested submissions + the start gate (a stat and a pwrite a task).
            from raydbg.memory import start_gate

            start_gate.worker_setup()
    _run_user_hook()


CHAINED_NAME = "raydbg_chained_setup_hook"


def chain(user_hook: Any) -> Any:
    """For a user hook given as a callable: a named function Ray can export (and pickle)."""

    def raydbg_chained_setup_hook() -> None:
        setup_hook()
        user_hook()

    return raydbg_chained_setup_hook


def _run_user_hook() -> None:
    name = os.environ.get(USER_HOOK_ENV)
    if not name:
        return
    config.load_object(name)()
