"""Builds and owns this process's tracer and meter providers (once per process).

`setup()` reads the plan from `OTEL_*` variables, builds exporters (embedded JSON
lines by default, OTLP, console), installs the providers globally when nobody else
did, and registers a bounded shutdown at exit. `state` is what the API reads.
"""

from __future__ import annotations

import atexit
import logging
import os
import sys
import threading
import time
from collections.abc import Callable
from typing import Any

from opentelemetry import metrics, trace
from opentelemetry.metrics import Observation
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import (
    ConsoleMetricExporter,
    InMemoryMetricReader,
    MetricExporter,
    MetricReader,
    PeriodicExportingMetricReader,
)
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import SpanProcessor, TracerProvider
from opentelemetry.sdk.trace.export import ConsoleSpanExporter, SpanExporter

from raydbg import _ray_internals
from raydbg.telemetry import output_dir, ray_attributes
from raydbg.telemetry.bounded import BoundedSpanProcessor
from raydbg.telemetry.jsonl import JsonlFile, JsonlMetricExporter, JsonlSpanExporter
from raydbg.telemetry.settings import Plan, read_plan
from raydbg.telemetry.state import State, decide, state
from raydbg.telemetry.state import lock as _lock

log = logging.getLogger("raydbg.telemetry")
SCOPE = "raydbg"
# Resource attributes copied onto every Prometheus series, so a node's processes never collide.
LABEL_RESOURCE_KEYS = frozenset({"raydbg.process", "process.pid"})


_atexit_registered = False


def _span_exporter(name: str, plan: Plan, jsonl: Callable[[], JsonlFile]) -> SpanExporter:
    if name == "jsonl":
        return JsonlSpanExporter(jsonl())
    if name == "console":
        return ConsoleSpanExporter()
    if plan.traces_protocol == "grpc":
        from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import (
            OTLPSpanExporter as GrpcSpanExporter,
        )

        return GrpcSpanExporter(timeout=plan.export_timeout_s)
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

    # Endpoint, headers and compression come from OTEL_EXPORTER_OTLP_* (read by the exporter).
    return OTLPSpanExporter(timeout=plan.export_timeout_s)


def _metric_exporter(
    name: str, plan: Plan, jsonl: Callable[[], JsonlFile]
) -> MetricExporter | None:
    if name == "jsonl":
        return JsonlMetricExporter(jsonl())
    if name == "console":
        return ConsoleMetricExporter()
    if name == "prometheus":
        return None  # pull only: the in-process reader behind prometheus_text()
    if plan.metrics_protocol == "grpc":
        from opentelemetry.exporter.otlp.proto.grpc.metric_exporter import (
            OTLPMetricExporter as GrpcMetricExporter,
        )

        return GrpcMetricExporter(timeout=plan.metric_timeout_s)
    from opentelemetry.exporter.otlp.proto.http.metric_exporter import OTLPMetricExporter

    return OTLPMetricExporter(timeout=plan.metric_timeout_s)


def _resource(kind: str) -> Resource:
    attrs = ray_attributes.resource_attributes(kind)
    if os.environ.get("OTEL_SERVICE_NAME"):
        attrs.pop("service.name")  # the user's name wins
    return Resource.create(attrs)


class _RayAttributes(SpanProcessor):
    """Stamps every span with the Ray job/node/task/actor/rank it ran under."""

    def on_start(self, span: Any, parent_context: Any = None) -> None:
        attrs = ray_attributes.span_attributes()
        if attrs:
            span.set_attributes(attrs)


def build(plan: Plan, kind: str) -> State:
    """Build providers and exporters for `plan` without installing anything globally."""
    built = State(kind=kind, plan=plan)
    resource = _resource(kind)

    def jsonl() -> JsonlFile:
        if built.jsonl is None:
            built.jsonl = JsonlFile(
                f"{kind}-{os.getpid()}.jsonl",
                lambda: output_dir.session_telemetry_dir(plan.jsonl_dir),
                output_dir.fallback_dir(),
                dict(resource.attributes),
                plan.jsonl_max_bytes,
                plan.jsonl_backups,
            )
        return built.jsonl

    tp = TracerProvider(resource=resource, shutdown_on_exit=False)
    if plan.traces:
        tp.add_span_processor(_RayAttributes())
    for name in plan.traces:
        proc = BoundedSpanProcessor(
            _span_exporter(name, plan, jsonl),
            max_queue_size=plan.max_queue_size,
            max_batch=plan.max_export_batch_size,
            delay_s=plan.schedule_delay_s,
            name=f"raydbg-telemetry-{name}",
        )
        tp.add_span_processor(proc)
        built.processors.append(proc)
    readers: list[MetricReader] = []
    if kind == "agent" or "prometheus" in plan.metrics:
        # Only a process that serves /metrics needs the live reader (each reader doubles
        # the cost of every metric update); others are served from their snapshot files.
        built.metric_reader = InMemoryMetricReader()  # every instrument cumulative by default
        readers.append(built.metric_reader)
    for name in plan.metrics:
        exporter = _metric_exporter(name, plan, jsonl)
        if exporter is not None:
            readers.append(
                PeriodicExportingMetricReader(
                    exporter,
                    export_interval_millis=plan.metric_interval_s * 1000,
                    export_timeout_millis=plan.metric_timeout_s * 1000,
                )
            )
    mp_kwargs: dict[str, Any] = {}
    if not plan.exemplars:  # else OTel's default (trace-based) or OTEL_METRICS_EXEMPLAR_FILTER
        from opentelemetry.sdk.metrics import AlwaysOffExemplarFilter

        mp_kwargs["exemplar_filter"] = AlwaysOffExemplarFilter()
    mp = MeterProvider(
        metric_readers=readers, resource=resource, shutdown_on_exit=False, **mp_kwargs
    )
    built.tracer_provider, built.meter_provider = tp, mp
    built.tracer = tp.get_tracer(SCOPE)
    sdk_meter = mp.get_meter(SCOPE)
    built.meter = sdk_meter
    sdk_meter.create_observable_counter(
        "raydbg.telemetry.spans.dropped",
        callbacks=[lambda _o: _dropped_observations(built)],
        unit="{span}",
        description="Spans dropped because an exporter's queue was full or its export failed",
    )
    return built


def _dropped_observations(built: State) -> list[Observation]:
    return [
        Observation(p.dropped + p.failed, {"exporter": p._thread.name.rsplit("-", 1)[-1]})
        for p in built.processors
    ]


def setup(kind: str | None = None) -> bool:
    """Set up telemetry for this process once (idempotent); False when switched off.

    `kind` names the process in file names and resource attributes (`driver`, `worker`,
    `agent`); by default Ray's view of this process. Safe from any thread.
    """
    global _atexit_registered
    with _lock:
        if state.tracer is not None:
            return True
        plan = read_plan(os.environ)
        for w in plan.warnings:
            log.warning("raydbg telemetry: %s", w)
        if not plan.enabled:
            return False
        built = build(plan, kind or ray_attributes.process_kind())
        _install_globals(built)
        built.generation = state.generation + 1
        built.auto = True
        state.__dict__.update(built.__dict__)
        if not _atexit_registered:
            atexit.register(shutdown)
            _atexit_registered = True
    if plan.tracing:
        propagate_to_ray_tasks()
    return True


def auto_setup() -> bool:
    """On the first span or metric of a process nobody set up: `setup()` when raydbg is
    active here (RAY_DEBUG=1 in the driver, carried to its workers); see state.decide."""
    return setup_decided() if decide() else state.tracer is not None


def setup_decided() -> bool:
    """`setup()` once `state.decide()` said so; never raises."""
    try:
        return setup()
    except Exception:  # telemetry must never break the code that emits
        log.exception("raydbg telemetry: automatic set-up failed; telemetry is off")
        return False


def propagate_to_ray_tasks() -> bool:
    """After `setup()`: turn trace propagation to Ray tasks on when the cluster has raydbg's
    tracing hook (activated jobs already have it on); retried once a driver connects.
    A traced call arriving here then sets telemetry up (`auto_setup`), as
    ray_tracing.py's hooks do."""
    if _ray_internals.task_tracing_enabled():
        return True
    ray = sys.modules.get("ray")
    if ray is None:
        return False
    if not ray.is_initialized():
        # A driver that set up telemetry before ray.init(): decide once it connects.
        _ray_internals.after_ray_init(_after_ray_init)
        return False
    if _ray_internals.cluster_tracing_hook() is not None:
        _ray_internals.enable_task_tracing(auto_setup)
        return True
    log.info(
        "raydbg telemetry: trace context is not propagated to Ray tasks; activate raydbg "
        "(RAY_DEBUG=1, raydbg run) or start the cluster with raydbg.telemetry.ray_init_kwargs()"
    )
    return False


def _after_ray_init() -> None:
    if state.tracer is not None:
        propagate_to_ray_tasks()


def _install_globals(built: State) -> None:
    # Global providers can be set once per process; if the user already set theirs,
    # raydbg keeps its own private ones and leaves the user's alone.
    if not isinstance(trace.get_tracer_provider(), TracerProvider):
        trace.set_tracer_provider(built.tracer_provider)  # type: ignore[arg-type]
    if not isinstance(metrics.get_meter_provider(), MeterProvider):
        metrics.set_meter_provider(built.meter_provider)  # type: ignore[arg-type]


def _bounded(fns: list[Callable[[], Any]], timeout_s: float) -> None:
    """Run `fns` in parallel daemon threads, waiting at most `timeout_s` for all of them.
    At interpreter exit Python 3.12+ starts no thread (RuntimeError): then each runs here,
    bounded only by its own timeout (the exporters'), so what was queued still goes out."""
    threads = [threading.Thread(target=f, name="raydbg-telemetry-stop", daemon=True) for f in fns]
    for i, t in enumerate(threads):
        try:
            t.start()
        except RuntimeError:  # "can't create new thread at interpreter shutdown"
            for f in fns[i:]:
                f()
            threads = threads[:i]
            break
    deadline = time.monotonic() + timeout_s
    for t in threads:
        t.join(max(0.0, deadline - time.monotonic()))


def flush(timeout_s: float = 5.0) -> bool:
    """Push queued spans and a metric snapshot out now (bounded wait)."""
    tp, mp = state.tracer_provider, state.meter_provider
    ok = all(p.force_flush(int(timeout_s * 1000)) for p in state.processors)
    if mp is not None:
        _bounded([lambda: mp.force_flush(int(timeout_s * 1000))], timeout_s)
    return ok and tp is not None


def shutdown(timeout_s: float = 3.0) -> None:
    """Flush and stop exporters, waiting at most about `timeout_s`; telemetry is off after."""
    with _lock:
        tp, mp = state.tracer_provider, state.meter_provider
        if tp is None:
            return
        state.tracer = None
        state.meter = None
        state.auto = False  # stopped on purpose: the next emission must not set up again
        fns: list[Callable[[], Any]] = [tp.shutdown]
        if mp is not None:
            fns.append(lambda: mp.shutdown(int(timeout_s * 1000)))
        _bounded(fns, timeout_s)
        state.tracer_provider = state.meter_provider = None


def stats() -> dict[str, Any]:
    """Exporter counters (`exported`, `dropped`, `failed`, `queued`) and the JSON-lines path."""
    return {
        "enabled": state.tracer is not None,
        "kind": state.kind,
        "exporters": {p._thread.name.rsplit("-", 1)[-1]: p.stats() for p in state.processors},
        "jsonl_path": state.jsonl.current_path() if state.jsonl else None,
    }
