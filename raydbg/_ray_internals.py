"""Ray's private modules and internals raydbg patches or reads, in one place (written for Ray 2.60.0).

Everything else in raydbg uses Ray's public API. When Ray changes, this is the file to
check: each entry names the private thing it relies on. tests/test_ray_private_uses.py
fails when another module imports a private Ray module or reads `_x` of a Ray name.

Ray couplings left outside this file, and why:
  registry.py, memory/budgets.py: `ray.experimental.internal_kv.internal_kv_get_gcs_client()`
    (a public module; the GcsClient it returns is a `_raylet` class, used by its public
    `internal_kv_*` methods).
  memory/work.py: field names of the protobuf rows `all_task_events` and
    `alive_actor_rows` return (TaskEvents, ActorTableData): data, read as plain fields.
  ray_processes.py, memory/work.py, memory/killer.py: process titles (`ray::IDLE`,
    `ray::<task>`) and the raylet's command line: Ray's process conventions, not Python APIs.
  agent/nodes.py, agent/lifecycle.py: the head's `node:__internal_head__` resource in
    `ray.nodes()` (public API, Ray's own marker of the head node).
"""

from __future__ import annotations

import functools
import logging
import time
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
    """Turn Ray's tracing flag on in this process at (almost) no cost for calls made outside
    any span: they open no span, compute no span attributes, carry None (so the worker runs
    the function plainly) and import nothing. A call inside a span takes Ray's full path.
    `on_context()` runs before a call's context is extracted here, so a worker can set
    telemetry up before Ray's consumer span starts."""
    import importlib

    th: Any = importlib.import_module(TRACING_HELPER_MODULE)
    if not th._global_is_tracing_enabled:
        th._opentelemetry = _OtelProxy()
        th._global_is_tracing_enabled = True
    propagator = th._DictPropagator
    inject, extract = propagator.inject_current_context, propagator.extract
    if getattr(inject, "_raydbg", False):
        return

    def inject_current_context() -> dict[str, Any] | None:
        return (inject() or None) if _in_context() else None

    def extract_context(context_dict: dict[str, Any]) -> Any:
        if on_context is not None:
            on_context()
        return extract(context_dict)

    def quiet(hydrate: Callable[..., dict[str, Any]]) -> Callable[..., dict[str, Any]]:
        # Span attributes cost ~10 runtime-context calls: only for spans that are made.
        return lambda *a: hydrate(*a) if _in_context() else {}

    inject_current_context._raydbg = True  # type: ignore[attr-defined]
    propagator.inject_current_context = inject_current_context
    # A task call outside any span skips Ray's tracing wrapper altogether (its quiet path
    # still cost a busy driver ~15 us a call, measured); the worker runs it plainly. Not
    # when the cluster's own tracing hook turned the flag on: that makes root spans there.
    untraced = _untraced_remote() if isinstance(th._opentelemetry, _OtelProxy) else None
    if untraced is not None:
        _submit["untraced"] = untraced
        _wrap_remote()
    propagator.extract = extract_context
    th._function_hydrate_span_args = quiet(th._function_hydrate_span_args)
    th._actor_hydrate_span_args = quiet(th._actor_hydrate_span_args)
    _drop_context_nobody_takes()


def _in_context() -> bool:
    """A span or baggage is current (never true before OpenTelemetry was imported)."""
    import sys

    context = sys.modules.get("opentelemetry.context")
    return context is not None and bool(context.get_current())


class _QuietSpan:
    """What Ray's `with tracer.start_as_current_span(...) as span:` gets outside any span."""

    def __enter__(self) -> _QuietSpan:
        return self

    def __exit__(self, *exc: object) -> None:
        return None

    def set_attribute(self, key: str, value: Any) -> None:
        return None


_QUIET = _QuietSpan()


class _Tracer:
    """Decides per span, when Ray starts it (after a worker attached the caller's context)."""

    def __init__(self, name: str) -> None:
        self.name = name

    def start_as_current_span(self, *args: Any, **kwargs: Any) -> Any:
        if not _in_context():
            return _QUIET
        import opentelemetry.trace

        return opentelemetry.trace.get_tracer(self.name).start_as_current_span(*args, **kwargs)


class _TraceModule:
    """`opentelemetry.trace` as Ray's tracing code uses it, without importing it up front."""

    class _NoKinds:
        PRODUCER = CONSUMER = None  # only ever passed to a _QuietSpan

    def get_tracer(self, name: str, *args: Any, **kwargs: Any) -> _Tracer:
        return _Tracer(name)

    @property
    def SpanKind(self) -> Any:  # noqa: N802 - OpenTelemetry's name
        import sys

        trace = sys.modules.get("opentelemetry.trace")
        return trace.SpanKind if trace is not None else self._NoKinds


class _OtelProxy:
    """Ray's `_OpenTelemetryProxy` (trace, context, propagate, Context), imports kept."""

    trace = _TraceModule()

    def __getattr__(self, name: str) -> Any:
        import importlib

        if name not in ("context", "propagate", "Context"):
            raise AttributeError(name)
        module = importlib.import_module("opentelemetry.context" if name == "Context" else
                                         f"opentelemetry.{name}")
        value = module.Context if name == "Context" else module
        setattr(self, name, value)
        return value


def _drop_context_nobody_takes() -> None:
    """Ray injects `_ray_trace_ctx` into every actor method call, but adds the parameter only
    to the methods it wraps: not generator methods, nor a function first called before the
    flag was on. `signature.flatten_args` (the caller side of `ray.actor` and
    `ray.remote_function`) then refuses the call; drop the keyword there instead, and
    wherever it is None (outside any span): an argument less to send (~20-40 µs a call).
    A call without arguments of a function whose only parameter is that one has nothing
    to check: Ray skips flatten_args for such calls of a function without parameters, and
    its check (inspect.Signature.bind) was ~10 % of a busy driver's time per call."""
    import importlib

    sig: Any = importlib.import_module("ray._common.signature")
    flatten = sig.flatten_args
    if getattr(flatten, "_raydbg", False):
        return

    def flatten_args(signature_parameters: Any, args: Any, kwargs: Any) -> Any:
        if kwargs and "_ray_trace_ctx" in kwargs and (
            kwargs["_ray_trace_ctx"] is None  # nothing to carry: the callee's default is None
            or not any(p.name == "_ray_trace_ctx" for p in signature_parameters)
        ):
            kwargs = {k: v for k, v in kwargs.items() if k != "_ray_trace_ctx"}
        if not args and not kwargs and all(p.name == "_ray_trace_ctx" for p in signature_parameters):
            return []
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


# --- Activation without a job runtime_env (raydbg.activation.node_setup_hook) ------------------
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


def node_identity() -> dict[str, str]:
    """`ray.session_name` and `ray.node_ip` of the connected node (`_global_node`), if known."""
    import sys

    ray = sys.modules.get("ray")
    try:
        node = ray._private.worker._global_node  # type: ignore[union-attr]
        if node is None:
            return {}
        return {"ray.session_name": node.session_name, "ray.node_ip": node.node_ip_address}
    except Exception:
        return {}


# --- Post-mortem (raydbg/worker/hook.py) ----------------------------------------------
# With RAY_DEBUG_POST_MORTEM=1, a failed task's `except` in _raylet.pyx calls
# `ray.util.pdb._post_mortem()` (ray.util.rpdb), which with RAY_DEBUG=1 calls
# `ray.util.debugpy._post_mortem()`; replacing both sends either path to raydbg.
POST_MORTEM_MODULES = ("ray.util.rpdb", "ray.util.debugpy")


def route_post_mortem(post_mortem: Callable[[], None]) -> None:
    """Make Ray's task-error path call `post_mortem()` (inside its except clause)."""
    import importlib

    for name in POST_MORTEM_MODULES:
        module: Any = importlib.import_module(name)
        module._post_mortem = post_mortem


# --- The memory monitor and its start gate (raydbg/memory/) ----------------------------
# Per task, `execute_task` in _raylet.pyx calls `worker.record_task_log_start(task_id,
# attempt_number)` after the arguments are deserialized and the process title names the
# task (`ray::<name>`), just before the function runs; and `record_task_log_end(task_id,
# attempt_number)` in the `finally` after it (a streaming generator is iterated to its end
# in between). Both are Python methods of `ray._private.worker.Worker`, called on
# `global_worker`: hooking them there runs the gate around every task without a frame of
# ours in the task's stack. `FunctionActorManager.get_execution_info(job_id, descriptor)`
# is called once per function per worker; `descriptor.function_id` is the id the submit
# side keys budgets by, and `get_task_function_name()` (public) names the running one.


def _function_key(descriptor: Any) -> str:
    """What `ray.get_runtime_context().get_task_function_name()` says for this function: the
    descriptor's call string, module and the last part of the qualified name
    (`m.driver.<locals>.grow` -> `m.grow`, measured)."""
    cls = getattr(descriptor, "class_name", "") or ""
    return f"{descriptor.module_name}.{cls + '.' if cls else ''}{_default_task_name(descriptor)}"


def _default_task_name(descriptor: Any) -> str:
    """The name Ray gives a task of this function without options(name=...) (measured:
    the last part of the qualified name)."""
    return str(descriptor.function_name).rsplit(".", 1)[-1]


def gate_task_functions(
    before: Callable[[str, int, str, str], tuple[float, Any, Any] | None],
    after: Callable[[], None],
) -> bool:
    """Call `before(task id hex, attempt, task name, function id)` before every normal sync
    task (not actor methods, not async functions) of this worker, and `after()` once such a
    task ended (returned, raised, or its generator ran out); idempotent; False when this
    Ray lacks the hook points.

    When `before` returns (until, field, flag), first attempts of the same function and
    task name that start before `until` (time.time()) while `flag[0]` is 0 only do
    `field[:] = task_id.hex().encode()`.
    "The same function" is taken from the task's name alone where that name has named one
    function only: the name is one function's default name, or a name the full path saw on
    one function only (the function-name getter costs a busy worker ~11 us, the name's ~1,
    measured). A function newly loaded here sends its first task down the full path, which
    sees a custom name shared with another function; tasks of two functions sharing a
    custom name that no full path has seen yet can take the other's ticket (its record
    then names the other function) until the full path sees them.
    A worker that becomes an actor's (it never runs a normal task again) gets Ray's own
    start back: its calls cost nothing here."""
    import inspect

    import ray

    try:
        from ray._private.function_manager import FunctionActorManager
    except Exception:
        return False
    worker: Any = ray._private.worker.global_worker
    start = getattr(worker, "record_task_log_start", None)
    end = getattr(worker, "record_task_log_end", None)
    if start is None or end is None or getattr(start, "_raydbg", False):
        return start is not None and getattr(start, "_raydbg", False)
    # function key -> function id of the functions we gate; "" when two functions share
    # a key (two nested `grow`s of one module): those go ungated rather than mixed up.
    gated: dict[str, str] = {}
    # task name -> the one function key seen with it; "" once two were.
    named: dict[str, str] = {}
    # The ticket of the last full call (see `before`), the function key and task name it is
    # for, and whether the name alone stands for that function. `flag` starts up: no ticket.
    until, field, flag, key, name, alone = 0.0, None, b"\1", "", "", False

    def learn(names: dict[str, str], name: str, key: str) -> None:
        names[name] = key if names.get(name, key) == key else ""

    lookup = FunctionActorManager.get_execution_info
    if not getattr(lookup, "_raydbg", False):

        @functools.wraps(lookup)
        def get_execution_info(self: Any, job_id: Any, descriptor: Any) -> Any:
            nonlocal until
            info = lookup(self, job_id, descriptor)
            try:
                until = 0.0  # a function new here: its first task takes the full path
                if descriptor.is_actor_method():
                    _ungate(worker)
                else:
                    key = _function_key(descriptor)
                    learn(named, _default_task_name(descriptor), key)
                    fn = info.function
                    if not (inspect.iscoroutinefunction(fn) or inspect.isasyncgenfunction(fn)):
                        learn(gated, key, descriptor.function_id.hex())
            except Exception:
                pass
            return info

        get_execution_info._raydbg = True  # type: ignore[attr-defined]
        FunctionActorManager.get_execution_info = get_execution_info  # type: ignore[method-assign,assignment]
    # This runs before every task, each time with a cold cache (every step and object it
    # touches costs 0.5-2 us then, measured): the core worker's getters are taken directly
    # (not through the runtime context's mode checks), and the quick path is a handful of
    # steps on closure variables.
    core = worker.core_worker
    function_name, task_name, actors, now = (
        core.get_current_task_function_name, core.get_current_task_name, worker.actors, time.time,
    )  # fmt: skip
    # Only a task that took the full path ends through raydbg: the others cost no frame.
    ends = [end]  # what the task's end called before (Ray's, or another tool's wrapper)

    def record_task_log_start(task_id: Any, attempt_number: int) -> None:
        try:  # never the reason a task fails
            if (
                not attempt_number and not flag[0] and task_name() == name and now() < until
                and (alone or function_name() == key)
            ):  # fmt: skip
                field[:] = task_id.hex().encode()  # type: ignore[index]
            else:
                full(task_id, attempt_number)
        except Exception:
            pass
        start(task_id, attempt_number)

    def full(task_id: Any, attempt_number: int) -> None:
        nonlocal until, field, flag, key, name, alone
        until = 0.0
        if not gated or actors:
            return
        task = task_name() or ""
        fn = function_name() or ""
        if task in named or len(named) < 1000:  # not names made per call, unbounded
            learn(named, task, fn)
        fid = gated.get(fn)
        if not fid:
            return
        if worker.record_task_log_end is not record_task_log_end:  # after() at its end
            ends[0] = worker.record_task_log_end
            worker.record_task_log_end = record_task_log_end
        ticket = before(task_id.hex(), int(attempt_number), task, fid)
        if ticket is not None:
            until, field, flag = ticket
            key, name, alone = fn, task, named.get(task) == fn

    def record_task_log_end(task_id: Any, attempt_number: int) -> None:
        worker.record_task_log_end = ends[0]
        ends[0](task_id, attempt_number)
        after()

    record_task_log_start._raydbg = True  # type: ignore[attr-defined]
    record_task_log_start._ray_start = start  # type: ignore[attr-defined]
    worker.record_task_log_start = record_task_log_start
    return True


def _ungate(worker: Any) -> None:
    """Ray's own task start again in this worker (it became an actor's)."""
    current = worker.record_task_log_start
    if getattr(current, "_raydbg", False):
        worker.record_task_log_start = current._ray_start


def current_task_id_hex() -> str | None:
    """The running task's id in this worker or driver (the public getter warns in a driver)."""
    try:
        import ray

        return str(ray._private.worker.global_worker.current_task_id.hex())
    except Exception:
        return None


# --- Task submission: retry budgets (raydbg/memory/budgets.py) and the tracing shortcut ---
# Every `f.remote()` and `f.options(...).remote()` of a normal task calls
# `RemoteFunction._remote(self, args, kwargs, serialized_runtime_env_info, **task_options)`
# (task_options: the call's options merged over the function's). On `self`:
# `_function_descriptor.function_id` (the id gate_task_functions sees in the worker),
# `_default_options` (the function's own options) and `_function_name` ("module.name").
# Ray's default `max_retries` is `ray._common.ray_option_utils.task_options`'s.
# `_remote` is `wrap_auto_init(_tracing_task_invocation(_remote))`: ray.init on first use,
# then, with the tracing flag on, a producer span and the injected context.

# What raydbg's one wrapper of `_remote` does: `after` (budgets), and `untraced` (the
# undecorated `_remote`, for calls made outside any span once the flag is on);
# `done`: the calls `after` is done with (see wrap_task_submit).
_submit: dict[str, Any] = {"after": None, "untraced": None, "done": {}}


def _wrap_remote() -> bool:
    """Wrap `RemoteFunction._remote` once; False when this Ray lacks it."""
    try:
        import ray._private.worker as worker_module
        from ray.remote_function import RemoteFunction
    except Exception:
        return False
    orig = getattr(RemoteFunction, "_remote", None)
    if orig is None:
        return False
    if getattr(orig, "_raydbg", False):
        return True
    unset = object()

    @functools.wraps(orig)
    def _remote(self: Any, *args: Any, **kwargs: Any) -> Any:
        untraced = _submit["untraced"]
        if untraced is not None and worker_module.global_worker.connected and not _in_context():
            result = untraced(self, *args, **kwargs)  # what Ray's wrappers would end in
        else:
            result = orig(self, *args, **kwargs)
        after = _submit["after"]
        if after is None:
            return result
        # id(remote function) -> (it, its descriptor, the option `after` is done with). The
        # descriptor is new when the function is exported to another job or cluster.
        done = _submit["done"]
        seen = done.get(id(self))
        option = kwargs.get("max_retries", unset)
        if seen is not None and seen[1] is self._function_descriptor and seen[2] == option:
            return result
        try:
            descriptor = self._function_descriptor
            fid = descriptor.function_id.hex()
            if after(result, fid, self._default_options, kwargs, getattr(self, "_function_name", "")):
                if len(done) > 1000:  # remote functions made per call
                    done.clear()
                done[id(self)] = (self, descriptor, option)
        except Exception as e:
            logging.getLogger("raydbg").debug("raydbg: after-submit hook failed: %s", e)
        return result

    _remote._raydbg = True  # type: ignore[attr-defined]
    RemoteFunction._remote = _remote  # type: ignore[method-assign]
    return True


def _unwrap_remote_if_unused() -> None:
    from ray.remote_function import RemoteFunction

    cur = RemoteFunction._remote
    if getattr(cur, "_raydbg", False) and _submit["after"] is None and _submit["untraced"] is None:
        RemoteFunction._remote = cur.__wrapped__  # type: ignore[attr-defined,method-assign]


def wrap_task_submit(
    after: Callable[[Any, str, dict[str, Any], dict[str, Any], str], bool],
) -> bool:
    """Call `after(result, function id hex, function options, call options, function name)`
    once each normal task from this process is submitted (`result`: what `.remote()`
    returned); False when this Ray lacks the hook point. Whatever `after` raises is
    logged at debug level: never the reason a submission fails.

    `after` returns True when calls of that function with that `max_retries` option need
    it no more: later ones are then not passed to it (most calls of a function repeat its
    first, and this runs at every `.remote()`, where each step costs a busy driver 1-2 us)."""
    if not _wrap_remote():
        return False
    if _submit["after"] is not after:
        _submit.update(after=after, done={})
    return True


def unwrap_task_submit() -> None:
    """Undo wrap_task_submit (tests)."""
    _submit["after"] = None
    _unwrap_remote_if_unused()


def _untraced_remote() -> Callable[..., Any] | None:
    """`_remote` without Ray's auto-init and tracing wrappers, if it has exactly those."""
    from ray.remote_function import RemoteFunction

    fn: Any = RemoteFunction._remote
    if getattr(fn, "_raydbg", False):
        fn = fn.__wrapped__
    names: list[str] = []
    while fn is not None:
        names.append(getattr(getattr(fn, "__code__", None), "co_name", ""))
        if len(names) == 3:
            break
        fn = getattr(fn, "__wrapped__", None)
    if names != ["auto_init_wrapper", "_invocation_remote_span", "_remote"]:
        return None
    return fn  # type: ignore[no-any-return]


@functools.cache
def default_task_max_retries() -> int:
    """Ray's `max_retries` for a task that sets none (before RAY_TASK_MAX_RETRIES)."""
    from ray._common import ray_option_utils

    return int(ray_option_utils.task_options["max_retries"].default_value)


def gcs_client(address: str) -> Any:
    """A GcsClient for `address` without ray.init (KV reads and writes)."""
    from ray._raylet import GcsClient  # type: ignore[attr-defined]

    return GcsClient(address=address)


def gcs_state(address: str | None = None) -> Any:
    """Ray's GlobalState: this connected process's, or one for `address` (no ray.init)."""
    if address is None:
        import ray

        return ray._private.state.state
    from ray._private.internal_api import get_state_from_address

    return get_state_from_address(address)


def all_task_events(state: Any) -> Any:
    """Every task event GCS holds (`GlobalState._get_all_task_events`: protobuf rows)."""
    return state._get_all_task_events()


def alive_actor_rows(state: Any) -> list[Any]:
    """ActorTableData protobufs of the cluster's live actors."""
    from ray.core.generated import gcs_pb2

    acc = state._connect_and_get_accessor()
    return [gcs_pb2.ActorTableData.FromString(raw) for raw in acc.get_actor_table(None, "ALIVE")]  # type: ignore[attr-defined]


def ray_auth_token() -> str | None:
    """Ray's own token when Ray token authentication is on (its loader), else None."""
    try:
        from ray._private.authentication.authentication_utils import is_token_auth_enabled
        from ray._raylet import AuthenticationTokenLoader  # type: ignore[attr-defined]

        if is_token_auth_enabled():
            raw = AuthenticationTokenLoader.instance().get_raw_token()
            return raw.decode() if isinstance(raw, bytes) else str(raw)
    except Exception:
        return None
    return None
