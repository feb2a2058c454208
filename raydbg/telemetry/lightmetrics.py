"""Light metrics: plain-Python cumulative aggregates for when JSON lines are the only metric exporter.

An SDK histogram update costs ~10 µs (measurement objects, view matching, exemplar
sampling under a span, one storage per reader); this is a dict lookup, a lock and a
bisect (~1-2 µs). `LightMeter` makes counters, up-down counters, gauges and histograms
with the SDK instruments' `add`/`set`/`record` signatures; `records()` returns them as
the embedded exporter's metric records (cumulative, as `jsonl.metric_records` writes
SDK data). Same rules as the SDK: negative or non-finite values are dropped from
counters and histograms, and at most 2000 attribute sets per instrument (more go to
one `otel.metric.overflow` point). OTLP, console and Prometheus use the SDK instead.
"""

from __future__ import annotations

import bisect
import logging
import math
import threading
import time
from collections.abc import Mapping, Sequence
from typing import Any

log = logging.getLogger("raydbg.telemetry")
CARDINALITY_LIMIT = 2000
_OVERFLOW = {"otel.metric.overflow": True}
# OpenTelemetry's default explicit bucket boundaries (the SDK's, for histograms without advice).
DEFAULT_BOUNDS = (0.0, 5.0, 10.0, 25.0, 50.0, 75.0, 100.0, 250.0, 500.0, 750.0, 1000.0, 2500.0, 5000.0, 7500.0, 10000.0)  # fmt: skip


def _key(attributes: Mapping[str, Any]) -> Any:
    try:
        return frozenset(attributes.items())
    except TypeError:  # list values
        return frozenset((k, tuple(v) if isinstance(v, list) else v) for k, v in attributes.items())


class _Light:
    kind = ""

    def __init__(self, name: str, unit: str, description: str) -> None:
        self.name, self.unit, self.description = name, unit, description
        self._lock = threading.Lock()
        self._points: dict[Any, list[Any]] = {}  # key -> [attributes, value...]
        self._warned = False

    def _point(self, attributes: Mapping[str, Any] | None) -> list[Any]:
        # Caller holds the lock.
        key = _key(attributes) if attributes else ()
        p = self._points.get(key)
        if p is None:
            if len(self._points) >= CARDINALITY_LIMIT:
                key, attributes = ("overflow",), _OVERFLOW
                p = self._points.get(key)
                if p is not None:
                    return p
            p = self._points[key] = self._new(dict(attributes or {}))
        return p

    def _new(self, attributes: dict[str, Any]) -> list[Any]:
        return [attributes, 0]

    def _drop(self, value: float) -> None:
        if not self._warned:
            self._warned = True
            log.warning("raydbg telemetry: %s %s got %r; dropped", self.kind, self.name, value)

    def record_dict(self) -> dict[str, Any]:
        with self._lock:
            points = [self._point_dict(p) for p in self._points.values()]
        return {
            "type": "metric",
            "ts": time.time(),
            "name": self.name,
            "kind": self.kind,
            "unit": self.unit,
            "description": self.description,
            "points": points,
        }

    def _point_dict(self, p: list[Any]) -> dict[str, Any]:
        return {"attributes": dict(p[0]), "value": p[1]}


class LightSum(_Light):
    def __init__(self, name: str, unit: str, description: str, monotonic: bool) -> None:
        super().__init__(name, unit, description)
        self.monotonic = monotonic
        self.kind = "counter" if monotonic else "updowncounter"

    def add(self, amount: float, attributes: Mapping[str, Any] | None = None) -> None:
        if (self.monotonic and amount < 0) or not math.isfinite(amount):
            self._drop(amount)
            return
        with self._lock:
            self._point(attributes)[1] += amount


class LightGauge(_Light):
    kind = "gauge"

    def set(self, value: float, attributes: Mapping[str, Any] | None = None) -> None:
        with self._lock:
            self._point(attributes)[1] = value


class LightHistogram(_Light):
    kind = "histogram"

    def __init__(
        self, name: str, unit: str, description: str, bounds: Sequence[float] | None
    ) -> None:
        super().__init__(name, unit, description)
        self.bounds = tuple(float(b) for b in (DEFAULT_BOUNDS if bounds is None else bounds))

    def _new(self, attributes: dict[str, Any]) -> list[Any]:
        # attributes, count, sum, min, max, bucket counts
        return [attributes, 0, 0, math.inf, -math.inf, [0] * (len(self.bounds) + 1)]

    def record(self, amount: float, attributes: Mapping[str, Any] | None = None) -> None:
        if not 0 <= amount < math.inf:  # negative, infinite or NaN (as the SDK drops them)
            self._drop(amount)
            return
        i = bisect.bisect_left(self.bounds, amount)  # buckets are (lower, upper]
        with self._lock:
            # Few calls on this path: it often runs right after a model step, caches cold.
            p = (self._points.get(()) if not attributes else None) or self._point(attributes)
            p[1] += 1
            p[2] += amount
            if amount < p[3]:
                p[3] = amount
            if amount > p[4]:
                p[4] = amount
            p[5][i] += 1

    def _point_dict(self, p: list[Any]) -> dict[str, Any]:
        return {
            "attributes": dict(p[0]),
            "count": p[1],
            "sum": p[2],
            "min": p[3],
            "max": p[4],
            "bounds": list(self.bounds),
            "counts": list(p[5]),
        }


class LightMeter:
    """Duck-types the four SDK `Meter.create_*` calls raydbg's API uses."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._instruments: dict[str, _Light] = {}

    def _add(self, inst: _Light) -> Any:
        with self._lock:
            return self._instruments.setdefault(inst.name, inst)

    def create_counter(self, name: str, unit: str = "", description: str = "") -> LightSum:
        return self._add(LightSum(name, unit, description, monotonic=True))

    def create_up_down_counter(self, name: str, unit: str = "", description: str = "") -> LightSum:
        return self._add(LightSum(name, unit, description, monotonic=False))

    def create_gauge(self, name: str, unit: str = "", description: str = "") -> LightGauge:
        return self._add(LightGauge(name, unit, description))

    def create_histogram(
        self,
        name: str,
        unit: str = "",
        description: str = "",
        explicit_bucket_boundaries_advisory: Sequence[float] | None = None,
    ) -> LightHistogram:
        return self._add(
            LightHistogram(name, unit, description, explicit_bucket_boundaries_advisory)
        )

    def records(self) -> list[dict[str, Any]]:
        """Cumulative metric records of every instrument that has points."""
        with self._lock:
            instruments = list(self._instruments.values())
        out = [inst.record_dict() for inst in instruments]
        return [r for r in out if r["points"]]
