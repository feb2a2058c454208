"""Resolves who this process is in Ray (job, node, worker, task/actor, Train rank), lazily.

Never imports or connects Ray: everything looks at `sys.modules` first, so a process
that has not used Ray pays nothing and a driver that calls `ray.init()` later is
picked up from then on. Per-task attributes are cached by task id.
"""

from __future__ import annotations

import os
import socket
import sys
import threading
from typing import Any

from raydbg import _ray_internals, private_dir

_lock = threading.Lock()
_static: dict[str, str] = {}
_task_cache: tuple[str | None, dict[str, Any]] = (None, {})


def _ray() -> Any | None:
    """The `ray` module if this process already imported it and is connected."""
    ray = sys.modules.get("ray")
    if ray is None:
        return None
    try:
        return ray if ray.is_initialized() else None
    except Exception:
        return None


def process_kind(default: str = "driver") -> str:
    """`worker` or `driver` as Ray sees this process; else `default`.

    Reads the worker mode, which Ray sets early in connect (so this is right even inside
    Ray's tracing start-up hook). A Ray worker has its mode before any user code runs, so
    a process without one is a driver, perhaps before `ray.init()`.
    """
    return _ray_internals.worker_mode() or default


def session_dir() -> str | None:
    """The Ray session directory of the connected cluster, or None."""
    return _ray_internals.session_dir() if _ray() is not None else None


def session_telemetry_dir(override: str | None = None) -> str | None:
    """`override`, else `<tmp>/raydbg-<uid>/sessions/<session>/telemetry` for the connected
    cluster's session (not in Ray's session dir: every local user can write there), else None."""
    if override:
        return override
    session = session_dir()
    return str(private_dir.session_path(session, "telemetry")) if session else None


def fallback_dir() -> str:
    # Not <tmp>/raydbg/...: a `raydbg` folder in the cwd would shadow the package.
    return str(private_dir.runtime_root() / "telemetry")


def prepare_dir(directory: str) -> None:
    """Create `directory` for writing; one of ours under `<tmp>/raydbg-<uid>` is made 0700
    level by level and checked (UnsafeDirError, an OSError, if another user made one first).
    A directory the user named is theirs to secure."""
    private_dir.make_dirs(directory)


def telemetry_dir(override: str | None = None) -> str:
    """Where the embedded JSON lines go: override, else the session's, else a temp dir."""
    return session_telemetry_dir(override) or fallback_dir()


def static_attributes() -> dict[str, str]:
    """Per-process Ray ids (job, node, worker, session); cached once Ray is connected."""
    if _static:
        return _static
    ray = _ray()
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


def _train_rank(ray: Any) -> int | None:
    # Only when Ray Train is already loaded in this process: never import it here.
    if "ray.train" not in sys.modules:
        return None
    try:
        rank = ray.train.get_context().get_world_rank()
        return int(rank) if rank is not None else None
    except Exception:
        return None


def task_attributes() -> dict[str, Any]:
    """Attributes of the task running on this thread (task, actor, Train rank); cached."""
    global _task_cache
    ray = _ray()
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
        rank = _train_rank(ray)
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
