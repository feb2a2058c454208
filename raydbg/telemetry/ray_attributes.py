"""Who this process is in Ray (job, node, worker, task/actor, Train rank), as span and resource attributes, lazily.

Never imports or connects Ray (raydbg.ray_context.connected_ray looks at `sys.modules`),
so a process that has not used Ray pays nothing and a driver that calls `ray.init()` later
is picked up from then on. Per-task attributes are cached by task id.
"""

from __future__ import annotations

import os
import socket
import threading
from typing import Any

from raydbg import _ray_internals, ray_context

_lock = threading.Lock()
_static: dict[str, str] = {}
_task_cache: tuple[str | None, dict[str, Any]] = (None, {})


def process_kind(default: str = "driver") -> str:
    """`worker` or `driver` as Ray sees this process; else `default`.

    Reads the worker mode, which Ray sets early in connect (so this is right even inside
    Ray's tracing start-up hook). A Ray worker has its mode before any user code runs, so
    a process without one is a driver, perhaps before `ray.init()`.
    """
    return _ray_internals.worker_mode() or default


def static_attributes() -> dict[str, str]:
    """Per-process Ray ids (job, node, worker, session); cached once Ray is connected."""
    if _static:
        return _static
    ray = ray_context.connected_ray()
    if ray is None:
        return {}
    attrs: dict[str, str] = {}
    try:
        ctx = ray.get_runtime_context()
        attrs["ray.job_id"] = ctx.get_job_id()
        attrs["ray.node_id"] = ctx.get_node_id()
        worker_id = ctx.get_worker_id()
        if worker_id:
            attrs["ray.worker_id"] = worker_id
        attrs.update(_ray_internals.node_identity())
    except Exception:
        return attrs
    with _lock:
        _static.update(attrs)
    return _static


def task_attributes() -> dict[str, Any]:
    """Attributes of the task running on this thread (task, actor, Train rank); cached."""
    global _task_cache
    ray = ray_context.connected_ray()
    # Only workers run tasks; asking in a driver makes Ray log a warning per call.
    if ray is None or process_kind() != "worker":
        return {}
    try:
        ctx = ray.get_runtime_context()
        task_id = ctx.get_task_id()
    except Exception:
        return {}
    cached_id, cached = _task_cache
    if task_id == cached_id:
        return cached
    attrs: dict[str, Any] = {}
    try:
        if task_id:
            attrs["ray.task_id"] = task_id
            name = ctx.get_task_name()
            if name:
                attrs["ray.task_name"] = name
        actor_id = ctx.get_actor_id()
        if actor_id:
            attrs["ray.actor_id"] = actor_id
        rank = ray_context.train_rank()
        if rank is not None:
            attrs["ray.train.world_rank"] = rank
    except Exception:
        pass
    _task_cache = (task_id, attrs)
    return attrs


def span_attributes() -> dict[str, Any]:
    """Ray ids every span is stamped with: the process's, plus the running task's."""
    static = static_attributes()
    if not static:  # not connected to Ray (yet): nothing to add
        return static
    task = task_attributes()
    return {**static, **task} if task else static


def resource_attributes(kind: str) -> dict[str, Any]:
    """OpenTelemetry resource attributes for this process, as far as known at set-up."""
    attrs: dict[str, Any] = {
        "service.name": "raydbg",
        "service.namespace": "ray",
        "raydbg.process": kind,
        "process.pid": os.getpid(),
        "host.name": socket.gethostname(),
    }
    attrs.update(static_attributes())
    return attrs


def reset_for_tests() -> None:
    global _task_cache
    with _lock:
        _static.clear()
        _task_cache = (None, {})
