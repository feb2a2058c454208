"""Activation: the runtime-env hook that puts raydbg into a job's workers, chaining user hooks."""

from __future__ import annotations

import os
import sys
from typing import Any

from raydbg import config

HOOK_NAME = "raydbg.activation.runtime_env_hook"
SETUP_HOOK_NAME = "raydbg.worker.hook.setup_hook"
USER_ENV_HOOK = "RAYDBG_USER_RUNTIME_ENV_HOOK"
CHAINED_NAME = "raydbg_chained_setup_hook"  # raydbg.worker.hook.chain's wrapper


def runtime_env(base: dict[str, Any] | None = None) -> dict[str, Any]:
    """`ray.init(runtime_env=raydbg.runtime_env())`: activate raydbg for this job.

    Turns RAY_DEBUG on for the job even if the driver's environment lacks it.
    """
    os.environ.setdefault("RAY_DEBUG", "1")
    return with_raydbg(base)


def with_raydbg(env: dict[str, Any] | None) -> dict[str, Any]:
    """A copy of `env` with raydbg's worker setup hook (chaining the user's) and settings."""
    out: dict[str, Any] = dict(env or {})
    from raydbg import compat

    if not compat.check("driver"):  # one line; the job runs with Ray's own debugger
        return out
    env_vars = dict(out.get("env_vars") or {})
    for key, value in config.carried_env().items():
        env_vars.setdefault(key, value)
    user_hook = out.get("worker_process_setup_hook")
    if user_hook is None or user_hook == SETUP_HOOK_NAME:
        out["worker_process_setup_hook"] = SETUP_HOOK_NAME
    elif isinstance(user_hook, str):
        env_vars["RAYDBG_USER_SETUP_HOOK"] = user_hook
        out["worker_process_setup_hook"] = SETUP_HOOK_NAME
    elif getattr(user_hook, "__name__", "") != CHAINED_NAME:
        from raydbg.worker.hook import chain

        out["worker_process_setup_hook"] = chain(user_hook)
    out["env_vars"] = env_vars
    install_driver_breakpoint()
    from raydbg.telemetry import ray_tracing

    # Before the job's first .remote(): trace context to its tasks (their hook takes it).
    ray_tracing.activate_driver()
    from raydbg.memory import settings

    if settings.current().budgets:
        # The memory monitor spares non-retriable work only if it knows each task's budget.
        from raydbg.memory import start_gate

        start_gate.driver_setup()
    return out


def runtime_env_hook(env: dict[str, Any] | None) -> dict[str, Any]:
    """Named by RAY_RUNTIME_ENV_HOOK; Ray calls it in the driver during ray.init()."""
    user = os.environ.get(USER_ENV_HOOK)
    if user and user != HOOK_NAME:
        env = config.load_object(user)(env)
    if not config.is_active():
        return dict(env or {})
    return with_raydbg(env)


def _driver_breakpoint(*args: Any, **kwargs: Any) -> None:
    """breakpoint() in the driver: an ordinary local pdb prompt, not a remote wait."""
    import pdb

    pdb.Pdb().set_trace(sys._getframe(1))


def install_driver_breakpoint() -> None:
    # ray.init sets PYTHONBREAKPOINT to a remote wait; replacing the hook itself wins.
    from raydbg import _ray_internals

    if _ray_internals.worker_mode() != "worker":
        sys.breakpointhook = _driver_breakpoint


def enable_in_environ(environ: dict[str, str]) -> None:
    """Point RAY_RUNTIME_ENV_HOOK at raydbg, keeping a user's hook to chain."""
    current = environ.get("RAY_RUNTIME_ENV_HOOK")
    if current and current != HOOK_NAME:
        environ[USER_ENV_HOOK] = current
    environ["RAY_RUNTIME_ENV_HOOK"] = HOOK_NAME
