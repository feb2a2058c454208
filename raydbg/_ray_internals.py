"""Ray's private modules and internals raydbg patches or reads, in one place (written for Ray 2.60.0).

Everything else in raydbg uses Ray's public API. When Ray changes, this is the file to
check: each entry names the private thing it relies on.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

RAY_VERSION_WRITTEN_FOR = "2.60.0"

# --- Ray Train V2 (torch backend) ---------------------------------------------------
# TorchConfig's backend runs `_setup_torch_process_group(backend, world_rank, world_size,
# init_method, timeout_s)` on every Train worker (worker_group.execute_single_async), and
# `_shutdown_torch(destroy_process_group)` when the run ends.
TORCH_CONFIG_MODULE = "ray.train.torch.config"
# DistributedTrainFnUtils.report is what `ray.train.report` (public) calls in a Train worker.
TRAIN_FN_UTILS_MODULE = "ray.train.v2._internal.execution.train_fn_utils"


def wrap_torch_pg_setup(module: Any, timeout_for: Callable[[int], int],
                        after: Callable[[dict[str, Any]], None]) -> bool:
    """Make Train's process-group setup use `timeout_for(user_timeout_s)`; `after(kwargs)` runs
    once the group exists. False when this Ray has no such function (nothing patched)."""
    original = getattr(module, "_setup_torch_process_group", None)
    if original is None or getattr(original, "_raydbg", False):
        return False

    # functools.wraps keeps __module__/__qualname__: cloudpickle still sends it by reference.
    @functools.wraps(original)
    def setup(*args: Any, **kwargs: Any) -> Any:
        names = ("backend", "world_rank", "world_size", "init_method", "timeout_s")
        kwargs.update(dict(zip(names, args, strict=False)))
        kwargs["timeout_s"] = timeout_for(int(kwargs.get("timeout_s", 1800)))
        out = original(**kwargs)
        after(kwargs)
        return out

    setup._raydbg = True  # type: ignore[attr-defined]
    module._setup_torch_process_group = setup
    return True


def wrap_torch_shutdown(module: Any, before: Callable[[], None]) -> bool:
    original = getattr(module, "_shutdown_torch", None)
    if original is None or getattr(original, "_raydbg", False):
        return False

    @functools.wraps(original)
    def shutdown(*args: Any, **kwargs: Any) -> Any:
        before()
        return original(*args, **kwargs)

    shutdown._raydbg = True  # type: ignore[attr-defined]
    module._shutdown_torch = shutdown
    return True


def wrap_train_report(module: Any, before: Callable[[], None]) -> bool:
    """Call `before()` at every `ray.train.report` of a Train worker."""
    cls = getattr(module, "DistributedTrainFnUtils", None)
    original = getattr(cls, "report", None)
    if cls is None or original is None or getattr(original, "_raydbg", False):
        return False

    @functools.wraps(original)
    def report(self: Any, *args: Any, **kwargs: Any) -> Any:
        before()
        return original(self, *args, **kwargs)

    report._raydbg = True  # type: ignore[attr-defined]
    cls.report = report
    return True


# --- Ray Train V2 state actor (stacks: which worker is which rank) ------------------
# ray.train.v2._internal.state.state_actor.get_state_actor() is the detached actor
# "train_v2_state_actor" (namespace "_train_state_actor") the Train controller reports
# to; get_train_runs() -> {run_id: TrainRun(id, name, job_id, status)},
# get_train_run_attempts() -> {run_id: {attempt_id: TrainRunAttempt(status, workers=[
# TrainWorker(world_rank, local_rank, node_id, pid, actor_id)])}} (pydantic models).
TRAIN_ACTIVE = frozenset({"INITIALIZING", "SCHEDULING", "RUNNING", "RESTARTING", "RESIZING"})


def train_runs(timeout: float = 5.0) -> list[dict[str, Any]]:
    """Live Ray Train V2 runs with their current attempt's workers; [] without Train or runs."""
    try:
        from ray.train.v2._internal.state.state_actor import get_state_actor
    except Exception:
        return []
    import ray

    actor = get_state_actor()
    if actor is None:
        return []
    runs: dict[str, Any]
    attempts: dict[str, Any]
    runs, attempts = ray.get([actor.get_train_runs.remote(), actor.get_train_run_attempts.remote()],
                             timeout=timeout)
    out = []
    for run_id, run in runs.items():
        status = getattr(run.status, "value", str(run.status))
        if status not in TRAIN_ACTIVE:
            continue
        latest = list((attempts.get(run_id) or {}).values())
        workers = latest[-1].workers if latest else []
        out.append({
            "run_id": run_id,
            "name": run.name,
            "job_id": run.job_id,
            "status": status,
            "world_size": len(workers),
            "workers": [
                {"world_rank": w.world_rank, "local_rank": w.local_rank, "node_id": w.node_id,
                 "pid": w.pid, "actor_id": w.actor_id}
                for w in workers
            ],
        })
    return out


# --- Ray's task tracing (ray/util/tracing/tracing_helper.py) -----------------------
# With `_global_is_tracing_enabled` on, `.remote()` opens a PRODUCER span and puts the
# injected context in a hidden `_ray_trace_ctx` keyword; a function first called while it
# is on is pickled inside `_function_with_tracing`, which in the worker calls
# `_get_opentelemetry()` (None unless the flag is on there too: every task then fails).
# `_DictPropagator.inject_current_context()` builds the carrier; `_OpenTelemetryProxy`
# imports OpenTelemetry on first attribute use; `ray._common.signature.flatten_args`
# checks a call's arguments against the function's signature. The cluster's tracing start-up hook is
# `tracing_startup_hook` in GCS internal KV (namespace `ray_constants.KV_NAMESPACE_TRACING`).
TRACING_HELPER_MODULE = "ray.util.tracing.tracing_helper"


def enable_task_tracing(on_context: Callable[[], object] | None = None) -> None:
    """Turn Ray's tracing flag on in this process, importing OpenTelemetry only when a traced
    call first comes or goes. An empty context travels as None (the worker then runs the
    function plainly: no consumer span, no import); `on_context()` runs before a call's
    context is extracted here, so a worker can set telemetry up before Ray's span starts."""
    import importlib

    th: Any = importlib.import_module(TRACING_HELPER_MODULE)
    if not th._global_is_tracing_enabled:
        th._opentelemetry = th._OpenTelemetryProxy()  # lazy: no try_all() import here
        th._global_is_tracing_enabled = True
    propagator = th._DictPropagator
    inject, extract = propagator.inject_current_context, propagator.extract
    if getattr(inject, "_raydbg", False):
        return

    def inject_current_context() -> dict[str, Any] | None:
        return inject() or None

    def extract_context(context_dict: dict[str, Any]) -> Any:
        if on_context is not None:
            on_context()
        return extract(context_dict)

    inject_current_context._raydbg = True  # type: ignore[attr-defined]
    propagator.inject_current_context = inject_current_context
    propagator.extract = extract_context
    _drop_context_nobody_takes()


def _drop_context_nobody_takes() -> None:
    """Ray injects `_ray_trace_ctx` into every actor method call, but adds the parameter only
    to the methods it wraps: not generator methods, nor a function first called before the
    flag was on. `signature.flatten_args` (the caller side of `ray.actor` and
    `ray.remote_function`) then refuses the call; drop the keyword there instead."""
    import importlib

    sig: Any = importlib.import_module("ray._common.signature")
    flatten = sig.flatten_args
    if getattr(flatten, "_raydbg", False):
        return

    def flatten_args(signature_parameters: Any, args: Any, kwargs: Any) -> Any:
        if kwargs and "_ray_trace_ctx" in kwargs and not any(
            p.name == "_ray_trace_ctx" for p in signature_parameters
        ):
            kwargs = {k: v for k, v in kwargs.items() if k != "_ray_trace_ctx"}
        return flatten(signature_parameters, args, kwargs)

    flatten_args._raydbg = True  # type: ignore[attr-defined]
    sig.flatten_args = flatten_args


def task_tracing_enabled() -> bool:
    """Whether `.remote()` calls from this process carry trace context (Ray's flag)."""
    import sys

    th = sys.modules.get(TRACING_HELPER_MODULE)
    return bool(th is not None and th._is_tracing_enabled())


def cluster_tracing_hook() -> str | None:
    """The cluster's tracing start-up hook (`ray start --tracing-startup-hook`), if any."""
    import ray
    from ray._private import ray_constants

    worker: Any = ray._private.worker.global_worker
    try:
        value = worker.gcs_client.internal_kv_get(
            b"tracing_startup_hook", ray_constants.KV_NAMESPACE_TRACING
        )
    except Exception:
        return None
    return value.decode() if value else None


def after_ray_init(fn: Callable[[], None]) -> None:
    """Run `fn` once this driver connects (Ray's post-init hooks; idempotent)."""
    import ray

    hooks = ray._private.worker._post_init_hooks
    if fn not in hooks:
        hooks.append(fn)


def worker_mode() -> str | None:
    """`worker` or `driver` as Ray sees this process (set early in connect), else None."""
    import sys

    ray = sys.modules.get("ray")
    try:
        mode = ray._private.worker.global_worker.mode if ray is not None else None
        if mode == ray._private.worker.WORKER_MODE:  # type: ignore[union-attr]
            return "worker"
        if mode == ray._private.worker.SCRIPT_MODE:  # type: ignore[union-attr]
            return "driver"
    except Exception:
        pass
    return None


def session_dir() -> str | None:
    """The connected node's Ray session directory, or None."""
    import sys

    ray = sys.modules.get("ray")
    try:
        node = ray._private.worker._global_node or getattr(  # type: ignore[union-attr]
            ray._private.worker.global_worker, "node", None  # type: ignore[union-attr]
        )
        return str(node.get_session_dir_path()) if node is not None else None
    except Exception:
        return None
