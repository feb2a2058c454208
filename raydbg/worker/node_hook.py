"""The setup hook raydbg's .pth offers every Ray worker: raydbg at the worker's first task,
if that task's job activated it (raydbg.activation.job_settings), with no job runtime_env."""

from __future__ import annotations

import os

NAME = "raydbg.worker.node_hook.setup_hook"


def offer() -> None:
    """In a Ray worker's interpreter start (.pth): name this hook, unless the job's
    runtime_env named one (Ray set the variable; raydbg's own or the user's)."""
    from raydbg import _ray_internals

    if _ray_internals.is_worker_process():
        os.environ.setdefault(_ray_internals.SETUP_HOOK_ENV, NAME)


def setup_hook() -> None:
    """Run by Ray after the worker connects; its job is known at its first task only."""
    from raydbg import _ray_internals

    if os.environ.get(_ray_internals.SETUP_HOOK_ENV) == NAME:
        # Read once; a process this worker starts (a job supervisor's driver) must not
        # inherit it: Ray refuses a job whose own hook differs from an inherited one.
        del os.environ[_ray_internals.SETUP_HOOK_ENV]
    _ray_internals.before_first_function(activate_if_asked)


def activate_if_asked(job_hex: str) -> None:
    """raydbg's worker setup, with the job's carried settings, if the job published them.
    A setting the worker's own runtime_env sets (job's or task's) keeps its value there, as
    the job's runtime_env env_vars would have under it."""
    from raydbg.activation import job_settings

    settings = job_settings(job_hex)
    if settings is None:
        return
    import ray

    own = ray.get_runtime_context().runtime_env.get("env_vars") or {}
    for key, value in settings.items():
        if key not in own:
            os.environ[key] = value
    from raydbg.worker import hook

    hook.setup_hook()
