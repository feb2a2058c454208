"""Where raydbg gets into Ray's processes: a worker's setup hook and first function, a
driver's connect.

Written for Ray 2.51.x to 2.60.x (each name below read in 2.51.2, 2.55.1 and 2.60.0). Relies on: the environment variable
`__RAY_WORKER_PROCESS_SETUP_HOOK_ENV_VAR` that default_worker.py reads, `RAY_RAYLET_PID`
in a worker's environment, `ray._private.function_manager.FunctionActorManager.
get_execution_info`, `ray._private.worker._post_init_hooks`, and the driver's
`ray._private.worker.global_worker.get_objects` (what `ray.get` calls).
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


def after_first_result(fn: Callable[[], None]) -> None:
    """Call `fn()` once, when this connected driver's first `ray.get` returns (or fails): the
    driver has had its first task's result. Wraps the worker's `get_objects` for one call."""
    import ray

    worker = ray._private.worker.global_worker
    original = worker.get_objects

    @functools.wraps(original)
    def get_objects(*args: Any, **kwargs: Any) -> Any:
        try:
            return original(*args, **kwargs)
        finally:
            if worker.__dict__.get("get_objects") is get_objects:
                worker.__dict__.pop("get_objects", None)  # back to the class's
                fn()

    worker.get_objects = get_objects  # type: ignore[method-assign]


_before_shutdown: list[Callable[[], object]] = []


def before_ray_shutdown(fn: Callable[[], object]) -> None:
    """Run `fn` before this process's Ray shuts down: in `ray.shutdown()` and at exit, before
    Ray's own atexit shutdown (atexit runs the later registration first; Ray registered its
    handler when `ray` was imported, before any call of this). Idempotent; errors are logged.

    Ray has no shutdown hook: `ray.shutdown` is wrapped (the name in `ray` and in
    `ray._private.worker`, whose own callers look it up there)."""
    if fn in _before_shutdown:
        return
    _before_shutdown.append(fn)
    if len(_before_shutdown) > 1:
        return
    import atexit

    import ray

    original = ray._private.worker.shutdown

    @functools.wraps(original)
    def shutdown(*args: Any, **kwargs: Any) -> Any:
        _run_before_shutdown()
        return original(*args, **kwargs)

    ray.shutdown = ray._private.worker.shutdown = shutdown
    atexit.register(_run_before_shutdown)


def _run_before_shutdown() -> None:
    for fn in list(_before_shutdown):
        try:
            fn()
        except Exception:
            logging.getLogger("raydbg").exception("raydbg: a step before Ray's shutdown failed")
