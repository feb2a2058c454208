"""Ray's task tracing, turned on at (almost) no cost for calls made outside any span.

Written for Ray 2.51.x to 2.60.x (each name below read in 2.51.2, 2.55.1 and 2.60.0). Relies on `ray.util.tracing.tracing_helper`'s
`_global_is_tracing_enabled`, `_opentelemetry`, `_is_tracing_enabled()`,
`_DictPropagator` (`inject_current_context`, `extract`), `_function_hydrate_span_args`
and `_actor_hydrate_span_args`; `ray._common.signature.flatten_args`; the connected
worker's `ray._private.worker.global_worker.gcs_client` and
`ray._private.ray_constants.KV_NAMESPACE_TRACING` (the cluster's tracing start-up hook).
What differs: `tracing_helper._get_opentelemetry()` is Ray 2.58+. Before it, a traced
function's wrapper is pickled with the driver's `_opentelemetry` (raydbg's `_OtelProxy`,
rebuilt fresh in the worker by its `__reduce__`), so nothing here needs to know which.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from raydbg._ray_internals import task_submit
from raydbg._ray_internals.otel_context import in_context

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
        return (inject() or None) if in_context() else None

    def extract_context(context_dict: dict[str, Any]) -> Any:
        if on_context is not None:
            on_context()
        return extract(context_dict)

    def quiet(hydrate: Callable[..., dict[str, Any]]) -> Callable[..., dict[str, Any]]:
        # Span attributes cost ~10 runtime-context calls: only for spans that are made.
        return lambda *a: hydrate(*a) if in_context() else {}

    inject_current_context._raydbg = True  # type: ignore[attr-defined]
    propagator.inject_current_context = inject_current_context
    # A task call outside any span skips Ray's tracing wrapper altogether (its quiet path
    # still cost a busy driver ~15 us a call, measured); the worker runs it plainly. Not
    # when the cluster's own tracing hook turned the flag on: that makes root spans there.
    if isinstance(th._opentelemetry, _OtelProxy):
        task_submit.skip_tracing_outside_spans()
    propagator.extract = extract_context
    th._function_hydrate_span_args = quiet(th._function_hydrate_span_args)
    th._actor_hydrate_span_args = quiet(th._actor_hydrate_span_args)
    _drop_context_nobody_takes()



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
        if not in_context():
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

        # Another thread may be importing it right now (the driver's agent start does): a
        # module still half initialised has no SpanKind yet, and no span of ours is current.
        return getattr(sys.modules.get("opentelemetry.trace"), "SpanKind", None) or self._NoKinds


class _OtelProxy:
    """Ray's `_OpenTelemetryProxy` (trace, context, propagate, Context), imports kept."""

    trace = _TraceModule()

    def __reduce__(self) -> tuple[type, tuple[()]]:
        # Ray < 2.58 pickles this object into traced functions: a fresh one there, never
        # the OpenTelemetry modules it has imported here.
        return (_OtelProxy, ())

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
