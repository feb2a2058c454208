"""Carries trace context across Ray task and actor calls, using Ray 2.60's own tracing hooks.

How (see docs/telemetry.md, "Trace context across Ray tasks"): when Ray's tracing
flag is on in a process, every `.remote()` call opens a PRODUCER span and injects the
current context, W3C `traceparent` included, into a hidden `_ray_trace_ctx` keyword
argument; the worker extracts it and runs the task under a CONSUMER span whose parent
is the caller's. Any `span()` inside the task is a child of that, so it shares the
caller's trace.

One rule keeps that safe: the callee is always ready, the caller decides. The flag must
be on in a *worker* before a call carrying context reaches it, or Ray's wrapper fails
(the old "setup() in the driver made every task fail": the driver's flag went on, the
workers' did not). raydbg's worker set-up hook turns it on in every worker of an
activated job, unconditionally and for free (OpenTelemetry is imported only when a
traced call arrives). An activated driver turns it on at `ray.init` (activation), before
its first `.remote()`; so does any process of a cluster started with raydbg's tracing
start-up hook. A call made outside any span carries no context at all. A process that
sets telemetry up turns it on where the cluster has that hook
(provider.propagate_to_ray_tasks: provider.py lies below this module, which imports it
to set telemetry up when context arrives).
"""

from __future__ import annotations

import logging
from typing import Any

from raydbg import _ray_internals

log = logging.getLogger("raydbg.telemetry")
HOOK = "raydbg.telemetry.ray_tracing:startup_hook"


def ray_init_kwargs() -> dict[str, Any]:
    """Extra `ray.init()` arguments that turn on trace propagation in every process.

    Only takes effect when `ray.init` starts a new local cluster (Ray's rule); for an
    existing cluster start its head with `--tracing-startup-hook` instead. Not needed
    in a raydbg-activated job (`RAY_DEBUG=1`), which propagates by default.
    """
    return {"_tracing_startup_hook": HOOK}


def startup_hook() -> None:
    """Called by Ray in every driver and worker at connect when the cluster has the hook."""
    from raydbg.telemetry.provider import setup

    try:
        _ray_internals.enable_task_tracing(_context_arrived)
        setup()
    except Exception:  # never fail a worker's start-up because of telemetry
        log.exception("raydbg telemetry set-up failed in Ray's tracing hook")


def worker_ready() -> None:
    """In every worker of an activated job, before its first task: accept trace context.

    Costs a flag (no OpenTelemetry import), so it is done whatever the telemetry switches
    say: a worker must never be the side that is not ready."""
    try:
        _ray_internals.enable_task_tracing(_context_arrived)
    except Exception:
        log.exception("raydbg telemetry: Ray's tracing hooks could not be enabled")


def _context_arrived() -> None:
    # A caller inside a span sent its context: this worker takes part in a trace, so set
    # telemetry up (once) before Ray's consumer span starts, which then gets recorded.
    from raydbg.telemetry.provider import auto_setup

    auto_setup()


def activate_driver() -> bool:
    """In an activated driver at `ray.init`: propagate trace context to the job's tasks,
    unless telemetry is switched off. Its workers run `worker_ready()` (raydbg's hook)."""
    import os

    from raydbg.telemetry.settings import read_plan

    if not read_plan(os.environ).tracing or _ray_internals.worker_mode() == "worker":
        return False
    try:
        _ray_internals.enable_task_tracing(_context_arrived)
    except Exception:
        log.exception("raydbg telemetry: Ray's tracing hooks could not be enabled")
        return False
    return True


def enabled() -> bool:
    """Whether `.remote()` calls from this process carry trace context now."""
    return _ray_internals.task_tracing_enabled()
