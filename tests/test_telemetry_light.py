"""Light spans and metrics (the embedded default's fast path) agree with the OpenTelemetry SDK:
same records, same nesting with SDK spans either way round, same W3C context, same
aggregates; and the plan picks them only when the JSON lines are the only exporter."""

from __future__ import annotations

import random
from typing import Any

import pytest
from opentelemetry import context, trace
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor, SpanExporter, SpanExportResult
from opentelemetry.trace import SpanContext, TraceFlags
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

from raydbg.telemetry.api import SECONDS_BUCKETS
from raydbg.telemetry.jsonl import metric_records, span_record
from raydbg.telemetry.light import LightSpan, LightTracer
from raydbg.telemetry.lightmetrics import CARDINALITY_LIMIT, LightMeter
from raydbg.telemetry.settings import read_plan


class _Keep(SpanExporter):
    def __init__(self) -> None:
        self.spans: list[ReadableSpan] = []

    def export(self, spans: Any) -> SpanExportResult:
        self.spans.extend(spans)
        return SpanExportResult.SUCCESS


@pytest.fixture
def tracers() -> Any:
    """A light tracer and an SDK tracer, both ending in `records` as JSON-lines dicts."""
    kept = _Keep()
    tp = TracerProvider()
    tp.add_span_processor(SimpleSpanProcessor(kept))
    light_ended: list[LightSpan] = []
    light = LightTracer(light_ended.append, lambda: {"ray.job_id": "01000000"}, None)

    def records() -> dict[str, dict[str, Any]]:
        recs = [s.record() for s in light_ended] + [span_record(s) for s in kept.spans]
        return {r["name"]: r for r in recs}

    yield light, tp.get_tracer("test"), records
    tp.shutdown()


def _run(tracer: Any, name: str, **attrs: Any) -> Any:
    sp = tracer.start_span(name, attributes=attrs)
    return sp, context.attach(trace.set_span_in_context(sp))


def _end(sp: Any, token: Any) -> None:
    sp.end()
    context.detach(token)


def test_light_and_sdk_spans_nest_both_ways(tracers: Any) -> None:
    light, sdk, records = tracers
    outer = _run(light, "light.outer", step=1)
    middle = _run(sdk, "sdk.middle")  # e.g. Ray's producer span under raydbg's
    inner = _run(light, "light.inner")
    for sp, token in (inner, middle, outer):
        _end(sp, token)
    recs = records()
    o, m, i = recs["light.outer"], recs["sdk.middle"], recs["light.inner"]
    assert o["parent_id"] is None and m["parent_id"] == o["span_id"]
    assert i["parent_id"] == m["span_id"]
    assert o["trace_id"] == m["trace_id"] == i["trace_id"]
    # Same record shape as an SDK span's; Ray ids stamped after the caller's attributes.
    assert set(o) == set(m) and o["kind"] == "internal" and o["status"] == "unset"
    assert o["attributes"] == {"step": 1, "ray.job_id": "01000000"}
    assert 0 <= i["duration"] <= o["duration"] and o["start"] <= i["start"]


def test_w3c_context_carries_light_span_ids(tracers: Any) -> None:
    light, _, _ = tracers
    sp, token = _run(light, "light.parent")
    carrier: dict[str, str] = {}
    TraceContextTextMapPropagator().inject(carrier)
    _end(sp, token)
    ctx = sp.get_span_context()
    assert carrier["traceparent"] == f"00-{ctx.trace_id:032x}-{ctx.span_id:016x}-03"
    remote = TraceContextTextMapPropagator().extract(carrier)
    child = light.start_span("light.remote_child", context=remote)
    assert child.trace_id == ctx.trace_id and child.parent_id == ctx.span_id


def test_unsampled_parent_is_followed(tracers: Any) -> None:
    light, _, _ = tracers
    parent = SpanContext(0xABC, 0xDEF, True, TraceFlags(TraceFlags.DEFAULT))
    child = light.start_span("x", context=trace.set_span_in_context(trace.NonRecordingSpan(parent)))
    assert not child.is_recording() and not isinstance(child, LightSpan)
    assert child.get_span_context().trace_id == 0xABC


def test_exception_status_events_and_late_calls(tracers: Any) -> None:
    light, sdk, records = tracers
    for tracer, name in ((light, "light.boom"), (sdk, "sdk.boom")):
        sp = tracer.start_span(name)
        sp.add_event("note", {"k": 1})
        sp.record_exception(ValueError("bad"))
        sp.set_status(trace.Status(trace.StatusCode.ERROR, "ValueError: bad"))
        sp.end()
        sp.set_attribute("after.end", 1)  # ignored, as the SDK does
        sp.end()  # a second end() changes nothing
    recs = records()
    lb, sb = recs["light.boom"], recs["sdk.boom"]
    assert lb["status"] == sb["status"] == "error"
    assert lb["status_message"] == sb["status_message"] == "ValueError: bad"
    assert [e["name"] for e in lb["events"]] == [e["name"] for e in sb["events"]]
    assert lb["events"][1]["attributes"].keys() == sb["events"][1]["attributes"].keys()
    assert "after.end" not in lb["attributes"]


def _sdk_records(feed: Any) -> dict[str, dict[str, Any]]:
    reader = InMemoryMetricReader()
    mp = MeterProvider(metric_readers=[reader])
    feed(mp.get_meter("test"))
    data = reader.get_metrics_data()
    mp.shutdown()
    assert data is not None
    return {r["name"]: r for r in metric_records(data)}


def _light_records(feed: Any) -> dict[str, dict[str, Any]]:
    meter = LightMeter()
    feed(meter)
    return {r["name"]: r for r in meter.records()}


def _points(rec: dict[str, Any]) -> list[dict[str, Any]]:
    return sorted(rec["points"], key=lambda p: sorted(p["attributes"].items()))


def test_light_metrics_match_the_sdk() -> None:
    rng = random.Random(1)
    values = [rng.expovariate(20) for _ in range(500)] + [0.001, 0.005, 0, 600, 1e4]

    def feed(meter: Any) -> None:
        secs = meter.create_histogram(
            "h.seconds", "s", "", explicit_bucket_boundaries_advisory=SECONDS_BUCKETS
        )
        plain = meter.create_histogram("h.plain", "1")
        for i, v in enumerate(values):
            secs.record(v, {"rank": i % 2})
            plain.record(v * 1000)
        secs.record(-1.0)  # dropped by both
        c = meter.create_counter("c", "{x}")
        for i in range(10):
            c.add(i, {"reason": "a" if i % 3 else "b"})
        c.add(-5)  # dropped by both
        ud = meter.create_up_down_counter("ud")
        ud.add(3)
        ud.add(-5)
        g = meter.create_gauge("g", "By")
        g.set(1.5, {"node": "n"})
        g.set(7, {"node": "n"})

    light, sdk = _light_records(feed), _sdk_records(feed)
    assert light.keys() == sdk.keys()
    for name in light:
        lr, sr = light[name], sdk[name]
        assert (lr["kind"], lr["unit"]) == (sr["kind"], sr["unit"]), name
        lp, sp = _points(lr), _points(sr)
        assert len(lp) == len(sp), name
        for a, b in zip(lp, sp, strict=True):
            assert a["attributes"] == b["attributes"]
            for k in ("value", "count", "min", "max", "bounds", "counts"):
                assert a.get(k) == b.get(k), (name, k)
            if "sum" in a:
                assert a["sum"] == pytest.approx(b["sum"])


def test_light_metrics_cap_attribute_sets() -> None:
    meter = LightMeter()
    c = meter.create_counter("c")
    for i in range(CARDINALITY_LIMIT + 10):
        c.add(1, {"i": i})
    points = meter.records()[0]["points"]
    assert len(points) == CARDINALITY_LIMIT + 1
    overflow = [p for p in points if p["attributes"] == {"otel.metric.overflow": True}]
    assert overflow[0]["value"] == 10


@pytest.mark.parametrize(
    ("env", "spans", "metrics"),
    [
        ({}, True, True),
        ({"RAYDBG_TELEMETRY_LIGHT": "0"}, False, False),
        ({"OTEL_TRACES_EXPORTER": "jsonl,console"}, False, True),
        ({"OTEL_EXPORTER_OTLP_ENDPOINT": "http://h:4318"}, False, False),
        ({"OTEL_METRICS_EXPORTER": "otlp"}, True, False),
        ({"OTEL_TRACES_SAMPLER": "traceidratio"}, False, True),
        ({"OTEL_SPAN_ATTRIBUTE_COUNT_LIMIT": "5"}, False, True),
    ],
)
def test_plan_uses_light_paths_only_for_the_embedded_files(
    env: dict[str, str], spans: bool, metrics: bool
) -> None:
    plan = read_plan(env)
    assert (plan.light_spans, plan.light_metrics) == (spans, metrics)
