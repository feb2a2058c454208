"""The embedded default exporter: spans and metric snapshots as JSON lines, one file per process.

Files live in `<session_dir>/raydbg-<uid>/telemetry/<kind>-<pid>.jsonl` (see `output_dir.
telemetry_dir`), rotate by size (`.1`, `.2`, ...), and start with a `resource` record.
Writes happen on export threads only (the span queue's, the metric reader's), never on
the caller's. Record shapes are documented in docs/telemetry.md.
"""

from __future__ import annotations

import json
import os
import threading
from collections.abc import Callable, Sequence
from typing import Any

from opentelemetry.sdk.metrics.export import (
    Gauge,
    Histogram,
    MetricExporter,
    MetricExportResult,
    MetricsData,
    Sum,
)
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export import SpanExporter, SpanExportResult

from raydbg.private_dir import open_private
from raydbg.telemetry import output_dir

_NS = 1e-9
SNAPSHOT_SUFFIX = ".metrics.json"
# One encoder for every line: json.dumps with options builds a new one per call.
_encode = json.JSONEncoder(separators=(",", ":"), default=str).encode


def _hex(value: int, width: int) -> str:
    return format(value, f"0{width}x")


def span_record(span: ReadableSpan) -> dict[str, Any]:
    """One span as a JSON-ready dict (times in epoch seconds, ids in hex)."""
    ctx = span.get_span_context()
    start = (span.start_time or 0) * _NS
    end = (span.end_time or span.start_time or 0) * _NS
    rec: dict[str, Any] = {
        "type": "span",
        "name": span.name,
        "trace_id": _hex(ctx.trace_id, 32) if ctx else None,
        "span_id": _hex(ctx.span_id, 16) if ctx else None,
        "parent_id": _hex(span.parent.span_id, 16) if span.parent else None,
        "kind": span.kind.name.lower(),
        "start": start,
        "end": end,
        "duration": end - start,
        "status": span.status.status_code.name.lower(),
        "attributes": dict(span.attributes or {}),
    }
    if span.status.description:
        rec["status_message"] = span.status.description
    if span.events:
        rec["events"] = [
            {"name": e.name, "ts": e.timestamp * _NS, "attributes": dict(e.attributes or {})}
            for e in span.events
        ]
    return rec


def metric_records(data: MetricsData) -> list[dict[str, Any]]:
    """Metric snapshot lines: one per metric, cumulative values, points with attributes."""
    out: list[dict[str, Any]] = []
    for rm in data.resource_metrics:
        for sm in rm.scope_metrics:
            for m in sm.metrics:
                points: list[dict[str, Any]] = []
                ts = 0.0
                if isinstance(m.data, Histogram):
                    kind = "histogram"
                    for hp in m.data.data_points:
                        ts = max(ts, hp.time_unix_nano * _NS)
                        points.append(
                            {
                                "attributes": dict(hp.attributes or {}),
                                "count": hp.count,
                                "sum": hp.sum,
                                "min": hp.min,
                                "max": hp.max,
                                "bounds": list(hp.explicit_bounds),
                                "counts": list(hp.bucket_counts),
                            }
                        )
                elif isinstance(m.data, Sum | Gauge):
                    if isinstance(m.data, Sum):
                        kind = "counter" if m.data.is_monotonic else "updowncounter"
                    else:
                        kind = "gauge"
                    for np_ in m.data.data_points:
                        ts = max(ts, np_.time_unix_nano * _NS)
                        points.append(
                            {"attributes": dict(np_.attributes or {}), "value": np_.value}
                        )
                else:  # pragma: no cover - exponential histograms are not configured
                    continue
                out.append(
                    {
                        "type": "metric",
                        "ts": ts,
                        "name": m.name,
                        "kind": kind,
                        "unit": m.unit or "",
                        "description": m.description or "",
                        "points": points,
                    }
                )
    return out


class JsonlFile:
    """An append-only JSON-lines file that follows the telemetry dir and rotates by size."""

    def __init__(
        self,
        basename: str,
        resolve_dir: Callable[[], str | None],
        fallback_dir: str,
        resource: dict[str, Any],
        max_bytes: int = 32 * 1024 * 1024,
        backups: int = 3,
    ) -> None:
        self.basename = basename
        self._resolve_dir = resolve_dir
        self.fallback_dir = fallback_dir
        self.resource = resource
        self.max_bytes = max_bytes
        self.backups = backups
        self.path: str | None = None
        self._fh: Any = None
        self._size = 0
        self._lock = threading.Lock()

    def current_path(self) -> str:
        """The file written now, or the one the next write will open."""
        return self.path or os.path.join(self._directory(), self.basename)

    def _directory(self) -> str:
        # The session dir once Ray is connected; before that the fallback; after
        # ray.shutdown() the last one used, so a process's tail stays with its session.
        found = self._resolve_dir()
        if found:
            return found
        if self.path is not None:
            return os.path.dirname(self.path)
        return self.fallback_dir

    def _open(self, directory: str) -> None:
        if self._fh is not None:
            self._fh.close()
        output_dir.prepare_dir(directory)
        self.path = os.path.join(directory, self.basename)
        fd = open_private(self.path, os.O_WRONLY | os.O_CREAT | os.O_APPEND)
        self._fh = os.fdopen(fd, "a", encoding="utf-8")
        self._size = self._fh.tell()
        self._write_line({"type": "resource", "attributes": self.resource})

    def _rotate(self) -> None:
        assert self.path is not None
        self._fh.close()
        self._fh = None
        for i in range(self.backups - 1, 0, -1):
            older = f"{self.path}.{i}"
            if os.path.exists(older):
                os.replace(older, f"{self.path}.{i + 1}")
        os.replace(self.path, f"{self.path}.1")
        self._open(os.path.dirname(self.path))

    def _write_line(self, record: dict[str, Any]) -> None:
        line = _encode(record) + "\n"
        self._fh.write(line)
        self._size += len(line)

    def write(self, records: Sequence[dict[str, Any]]) -> None:
        with self._lock:
            directory = self._directory()
            # Ray may connect after set-up: move from the temp dir to the session dir then.
            if self._fh is None or self.path is None or os.path.dirname(self.path) != directory:
                self._open(directory)
            for rec in records:
                self._write_line(rec)
                if self._size >= self.max_bytes:
                    self._rotate()
            self._fh.flush()

    def close(self) -> None:
        with self._lock:
            if self._fh is not None:
                self._fh.close()
                self._fh = None


class JsonlSpanExporter(SpanExporter):
    def __init__(self, file: JsonlFile) -> None:
        self.file = file

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        try:
            self.file.write([span_record(s) for s in spans])
        except OSError:
            return SpanExportResult.FAILURE
        return SpanExportResult.SUCCESS

    def shutdown(self) -> None:
        self.file.close()


class JsonlMetricExporter(MetricExporter):
    """Writes each SDK collection as metric lines (and the latest snapshot beside them)."""

    def __init__(self, file: JsonlFile) -> None:
        # No preference stated: the reader's default, cumulative for every instrument, so
        # the last snapshot in a file is the process's current total.
        super().__init__()
        self.file = file

    def export(
        self, metrics_data: MetricsData, timeout_millis: float = 10_000, **kwargs: Any
    ) -> MetricExportResult:
        records = metric_records(metrics_data)
        try:
            self.file.write(records)
            self._write_snapshot(records)
        except OSError:
            return MetricExportResult.FAILURE
        return MetricExportResult.SUCCESS

    def _write_snapshot(self, records: list[dict[str, Any]]) -> None:
        # The node agent serves every process's metrics from these small files, so it
        # never has to scan the (large, span-heavy) JSON-lines logs.
        if self.file.path is None:
            return
        path = self.file.path.removesuffix(".jsonl") + SNAPSHOT_SUFFIX
        tmp = f"{path}.tmp"
        fd = open_private(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            json.dump({"resource": self.file.resource, "metrics": records}, fh, default=str)
        os.replace(tmp, path)

    def force_flush(self, timeout_millis: float = 10_000) -> bool:
        return True

    def shutdown(self, timeout_millis: float = 30_000, **kwargs: Any) -> None:
        self.file.close()

