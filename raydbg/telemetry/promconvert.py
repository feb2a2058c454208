"""OpenTelemetry `MetricsData` as prometheus_client metric families, by OTel's Prometheus rules.

The rules are the OpenTelemetry specification's (compatibility/prometheus_and_openmetrics),
applied as OpenTelemetry's own Prometheus exporter (0.66b2) applies them: names and label
keys sanitized, UCUM units as name suffixes (`s` -> `_seconds`, `By` -> `_bytes`, `{kill}`
-> none), monotonic sums as counters (`_total`), cumulative non-monotonic sums as gauges,
label values that are not strings as JSON. raydbg does this itself because that exporter
translates only inside its private collector; tests/test_telemetry_promconvert.py checks
that both give the same text.
"""

from __future__ import annotations

import json
import re
from collections.abc import Container, Iterable, Mapping
from itertools import accumulate, chain
from typing import Any

from opentelemetry.sdk.metrics.export import (
    AggregationTemporality,
    Gauge,
    Histogram,
    Metric,
    MetricsData,
    Sum,
)
from opentelemetry.sdk.resources import Resource
from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    InfoMetricFamily,
)
from prometheus_client.metrics_core import Metric as PromMetric

_NAME_BAD = re.compile(r"[^a-zA-Z0-9:]+")
_LABEL_BAD = re.compile(r"[^a-zA-Z0-9]+")
_ANNOTATION = re.compile(r"{.*}")  # UCUM annotations such as {kill} name no unit
_UNITS = {
    "d": "days", "h": "hours", "min": "minutes", "s": "seconds", "ms": "milliseconds",
    "us": "microseconds", "ns": "nanoseconds",
    "By": "bytes", "KiBy": "kibibytes", "MiBy": "mebibytes", "GiBy": "gibibytes",
    "TiBy": "tibibytes", "KBy": "kilobytes", "MBy": "megabytes", "GBy": "gigabytes",
    "TBy": "terabytes",
    "m": "meters", "V": "volts", "A": "amperes", "J": "joules", "W": "watts", "g": "grams",
    "Cel": "celsius", "Hz": "hertz", "1": "", "%": "percent",
}  # fmt: skip
_PER_UNITS = {"s": "second", "m": "minute", "h": "hour", "d": "day", "w": "week",
              "mo": "month", "y": "year"}  # fmt: skip


def metric_name(name: str) -> str:
    """`raydbg.memory.kills` -> `raydbg_memory_kills` (OTel names start with a letter)."""
    return _NAME_BAD.sub("_", name)


def label_name(key: str) -> str:
    """`ray.job_id` -> `ray_job_id` (no `:` in label names)."""
    if key[:1].isdigit():
        key = "_" + key[1:]
    return _LABEL_BAD.sub("_", key)


def unit_suffix(unit: str) -> str:
    """UCUM unit -> Prometheus suffix: `s` -> `seconds`, `{image}/s` -> `per_second`."""
    unit = _ANNOTATION.sub("", unit)
    if unit in _UNITS:
        return _UNITS[unit]
    top, slash, bottom = unit.partition("/")
    bottom = _NAME_BAD.sub("_", bottom)
    if slash and bottom:
        top = _NAME_BAD.sub("_", top)
        top = _UNITS.get(top, top)
        per = _PER_UNITS.get(bottom, bottom)
        return f"{top}_per_{per}" if top else f"per_{per}"
    return _NAME_BAD.sub("_", unit).strip("_")


def _value(value: Any) -> str:
    return value if isinstance(value, str) else json.dumps(value, default=str)


def _family(metric: Metric, resource_labels: Mapping[str, Any]) -> PromMetric | None:
    data = metric.data
    if not isinstance(data, Sum | Gauge | Histogram):
        return None  # exponential histograms: raydbg configures none
    rows = [
        {label_name(k): _value(v) for k, v in chain(resource_labels.items(), attrs.items())}
        for attrs in (p.attributes or {} for p in data.data_points)
    ]
    keys = sorted({k for row in rows for k in row})
    values = [[row.get(k, "") for k in keys] for row in rows]  # every sample has every label
    args: dict[str, Any] = {
        "name": metric_name(metric.name),
        "documentation": metric.description or "",
        "labels": keys,
        "unit": unit_suffix(metric.unit or ""),
    }
    if isinstance(data, Histogram):
        hist = HistogramMetricFamily(**args)
        for labels, hp in zip(values, data.data_points, strict=True):
            bounds = [str(b) for b in hp.explicit_bounds] + ["+Inf"]
            # OTel counts per bucket; Prometheus counts up to each bound.
            buckets = list(zip(bounds, accumulate(hp.bucket_counts), strict=True))
            hist.add_metric(labels, buckets=buckets, sum_value=hp.sum)
        return hist
    # The spec: a cumulative sum that can go down is a gauge, not a counter.
    is_counter = isinstance(data, Sum) and (
        data.is_monotonic or data.aggregation_temporality != AggregationTemporality.CUMULATIVE
    )
    fam: CounterMetricFamily | GaugeMetricFamily
    fam = CounterMetricFamily(**args) if is_counter else GaugeMetricFamily(**args)
    for labels, np_ in zip(values, data.data_points, strict=True):
        fam.add_metric(labels, np_.value)
    return fam


def families(datas: Iterable[MetricsData], resource_keys: Container[str]) -> list[PromMetric]:
    """One family per Prometheus name; the same name from another process (or scope) adds its
    samples to it. Resource attributes in `resource_keys` become labels of every sample."""
    out: dict[str, PromMetric] = {}
    for data in datas:
        for rm in data.resource_metrics:
            res = {k: v for k, v in rm.resource.attributes.items() if k in resource_keys}
            for sm in rm.scope_metrics:
                for metric in sm.metrics:
                    fam = _family(metric, res)
                    if fam is None:
                        continue
                    have = out.setdefault(fam.name, fam)
                    if have is not fam:
                        have.samples.extend(fam.samples)
    return list(out.values())


def target_info(resource: Resource) -> PromMetric:
    """`target_info{...} 1`: the whole resource, once (the OTel exporter's default)."""
    attrs = {label_name(k): _value(v) for k, v in resource.attributes.items()}
    return InfoMetricFamily("target", "Target metadata", value=attrs)
