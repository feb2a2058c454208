"""Where raydbg gets into Ray's processes: a worker's setup hook and first function, a
driver's connect.

Written for Ray 2.51.x to 2.60.x (each name below read in 2.51.2, 2.55.1 and 2.60.0). Relies on: the environment variable
`__RAY_WORKER_PROCESS_SETUP_HOOK_ENV_VAR` that default_worker.py reads, `RAY_RAYLET_PID`
in a worker's environment, `ray._private.function_manager.FunctionActorManager.
get_execution_info`, and `ray._private.worker._post_init_hooks`.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Callable
from typing import Any

# --- Activation without a job runtime_env (raydbg's node hook) -------------------------
# default_worker.py runs the setup hook this variable names after the worker connects (Ray
# sets it from a runtime_env's `worker_process_setup_hook`). A worker is a process started
# by the raylet (`RAY_RAYLET_PID` in its environment) running default_worker.py.
SETUP_HOOK_ENV = "__RAY_WORKER_PROCESS_SETUP_HOOK_ENV_VAR"
WORKER_SCRIPT = "default_worker.py"


def is_worker_process() -> bool:
    """This interpreter is a Ray worker process (works before `ray` is imported)."""
    import os
    import sys

    return "RAY_RAYLET_PID" in os.environ and bool(sys.argv) and sys.argv[0].endswith(WORKER_SCRIPT)


def before_first_function(fn: Callable[[str], None]) -> None:
    """Call `fn(job id hex)` once, when this worker first loads a task's or actor's function
    (a prestarted worker belongs to no job before), then load it through whatever wraps
    `get_execution_info` by then (fn may install the gate). Errors of fn are logged."""
    import threading

    from ray._private.function_manager import FunctionActorManager

    original = FunctionActorManager.get_execution_info
    lock = threading.Lock()

    @functools.wraps(original)
    def get_execution_info(self: Any, job_id: Any, descriptor: Any) -> Any:
        with lock:
            if FunctionActorManager.get_execution_info is get_execution_info:
                FunctionActorManager.get_execution_info = original  # type: ignore[method-assign]
                try:
                    fn(job_id.hex())
                except Exception:
                    logging.getLogger("raydbg").exception("raydbg: worker activation failed")
        return FunctionActorManager.get_execution_info(self, job_id, descriptor)

    FunctionActorManager.get_execution_info = get_execution_info  # type: ignore[method-assign,assignment]



def after_ray_init(fn: Callable[[], None]) -> None:
    """Run `fn` once this driver connects (Ray's post-init hooks; idempotent)."""
    import ray

    hooks = ray._private.worker._post_init_hooks
    if fn not in hooks:
        hooks.append(fn)
