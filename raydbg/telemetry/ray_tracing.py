"""Carries trace context across Ray task and actor calls, using Ray 2.60's own tracing hooks.

How (see docs/telemetry.md, "Trace context across Ray tasks"): when Ray's tracing
flag is on in a process (`ray.util.tracing.tracing_helper._enable_tracing()`), every
`.remote()` call opens a PRODUCER span and injects the current context, W3C
`traceparent` included, into a hidden `_ray_trace_ctx` keyword argument; the worker
extracts it and runs the task under a CONSUMER span whose parent is the caller's. Any
`span()` inside the task is a child of that, so it shares the caller's trace.

The flag must be on in the *worker* before it receives such an argument, or Ray's
wrapper fails. Ray guarantees that for every process when the cluster was started
with a tracing start-up hook (`ray.init(**ray_init_kwargs())` or `ray start --head
--tracing-startup-hook=raydbg.telemetry.ray_tracing:startup_hook`). With
`RAYDBG_TRACE_TASKS=1` (carried to the job's workers), raydbg's worker set-up hook calls
`telemetry.setup()` in every worker, which enables it too. The caller side is therefore
switched on only when one of those holds. (The hook does not set telemetry up otherwise:
importing OpenTelemetry costs every worker ~130 ms at start.)
"""

from __future__ import annotations

import logging
import os
import sys
from typing import Any

log = logging.getLogger("raydbg.telemetry")
HOOK = "raydbg.telemetry.ray_tracing:startup_hook"
_KV_KEY = b"tracing_startup_hook"


def ray_init_kwargs() -> dict[str, Any]:
    """Extra `ray.init()` arguments that turn on trace propagation in every process.

    Only takes effect when `ray.init` starts a new local cluster (Ray's rule); for an
    existing cluster start its head with `--tracing-startup-hook` instead.
    """
    return {"_tracing_startup_hook": HOOK}


def startup_hook() -> None:
    """Called by Ray in every driver and worker at connect when the cluster has the hook."""
    from raydbg.telemetry.provider import setup

    try:
        setup()
    except Exception:  # never fail a worker's start-up because of telemetry
        log.exception("raydbg telemetry set-up failed in Ray's tracing hook")


def _ray() -> Any | None:
    ray = sys.modules.get("ray")
    return ray if ray is not None and ray.is_initialized() else None


def _cluster_has_hook(ray: Any) -> bool:
    from ray._private import ray_constants

    try:
        value = ray._private.worker.global_worker.gcs_client.internal_kv_get(
            _KV_KEY, ray_constants.KV_NAMESPACE_TRACING
        )
    except Exception:
        return False
    return value is not None


def trace_tasks_requested() -> bool:
    return os.environ.get("RAYDBG_TRACE_TASKS", "").strip().lower() in ("1", "true", "yes", "on")


def propagation_safe(ray: Any) -> bool:
    """True when every worker of this job is sure to have Ray's tracing flag on."""
    return trace_tasks_requested() or _cluster_has_hook(ray)


def enabled() -> bool:
    """Whether `.remote()` calls from this process carry trace context now."""
    mod = sys.modules.get("ray.util.tracing.tracing_helper")
    return bool(mod is not None and mod._is_tracing_enabled())


def enable() -> bool:
    """Turn propagation on in this process when it is safe; retried after `ray.init()`."""
    ray = sys.modules.get("ray")
    if ray is None:
        return False
    if not ray.is_initialized():
        # A driver that set up telemetry before ray.init(): decide once it connects.
        hooks = ray._private.worker._post_init_hooks
        if _after_init not in hooks:
            hooks.append(_after_init)
        return False
    from ray.util.tracing import tracing_helper

    # Caller and callee follow one rule, so a worker never gets context it cannot take.
    if propagation_safe(ray):
        tracing_helper._enable_tracing()
        return True
    log.info(
        "raydbg telemetry: trace context is not propagated to Ray tasks; start the cluster "
        "with raydbg.telemetry.ray_init_kwargs(), or set RAYDBG_TRACE_TASKS=1 with raydbg active"
    )
    return False


def _after_init() -> None:
    from raydbg.telemetry.provider import state

    if state.tracer is not None:
        enable()
