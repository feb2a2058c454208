"""A span processor that never blocks the caller: bounded queue, one export thread, drops counted.

OpenTelemetry's BatchSpanProcessor logs a warning per dropped span and its shutdown
can wait on a dead endpoint; this one counts drops quietly (`stats()`), exports in
batches from a daemon thread, and bounds every wait it does at shutdown.
"""

from __future__ import annotations

import collections
import threading
import time
from collections.abc import Callable
from typing import Any

from opentelemetry.context import Context
from opentelemetry.sdk.trace import ReadableSpan, Span, SpanProcessor
from opentelemetry.sdk.trace.export import SpanExporter, SpanExportResult


class BoundedSpanProcessor(SpanProcessor):
    """Queue ended spans (drop when full) and export them in batches on a daemon thread."""

    def __init__(
        self,
        exporter: SpanExporter,
        max_queue_size: int = 2048,
        max_batch: int = 512,
        delay_s: float = 1.0,
        on_start_attributes: Callable[[], dict[str, Any]] | None = None,
        name: str = "raydbg-telemetry-spans",
    ) -> None:
        self.exporter = exporter
        self.max_queue_size = max_queue_size
        self.max_batch = max_batch
        self.delay_s = delay_s
        self._attrs = on_start_attributes
        # deque.append/popleft are atomic; the length check races benignly (a few extra).
        self._queue: collections.deque[ReadableSpan] = collections.deque()
        self._wake = threading.Event()
        self._flushed = threading.Condition()
        self._flush_requests = 0
        self._flush_done = 0
        self._stopped = False
        self.dropped = 0
        self.exported = 0
        self.failed = 0
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)
        self._thread.start()

    def on_start(self, span: Span, parent_context: Context | None = None) -> None:
        if self._attrs is not None:
            attrs = self._attrs()
            if attrs:
                span.set_attributes(attrs)

    def on_end(self, span: ReadableSpan) -> None:
        if self._stopped or len(self._queue) >= self.max_queue_size:
            self.dropped += 1
            return
        self._queue.append(span)
        if len(self._queue) >= self.max_batch and not self._wake.is_set():
            self._wake.set()  # is_set first: set() takes a lock, and bursts call this a lot

    def _take(self) -> list[ReadableSpan]:
        batch: list[ReadableSpan] = []
        while self._queue and len(batch) < self.max_batch:
            batch.append(self._queue.popleft())
        return batch

    def _export(self, batch: list[ReadableSpan]) -> None:
        try:
            ok = self.exporter.export(batch) == SpanExportResult.SUCCESS
        except Exception:
            ok = False
        if ok:
            self.exported += len(batch)
        else:
            # The exporter gave up on these (unreachable endpoint, full disk): count them.
            self.failed += len(batch)

    def _run(self) -> None:
        while True:
            self._wake.wait(self.delay_s)
            self._wake.clear()
            with self._flushed:
                target = self._flush_requests
            while self._queue:
                self._export(self._take())
            with self._flushed:
                self._flush_done = target
                self._flushed.notify_all()
            if self._stopped:
                return

    def force_flush(self, timeout_millis: int = 30000) -> bool:
        deadline = time.monotonic() + timeout_millis / 1000
        with self._flushed:
            self._flush_requests += 1
            target = self._flush_requests
            self._wake.set()
            while self._flush_done < target:
                left = deadline - time.monotonic()
                if left <= 0 or not self._thread.is_alive():
                    return False
                self._flushed.wait(left)
        return True

    def shutdown(self, timeout_millis: int = 3000) -> None:
        if self._stopped:
            return
        self.force_flush(timeout_millis)
        self._stopped = True
        self._wake.set()
        self._thread.join(timeout_millis / 1000)
        # Spans still queued after the bounded wait are lost: say so in the counts.
        self.dropped += len(self._queue)
        self._queue.clear()
        try:
            self.exporter.shutdown()
        except Exception:
            pass

    def stats(self) -> dict[str, int]:
        return {
            "queued": len(self._queue),
            "exported": self.exported,
            "dropped": self.dropped,
            "failed": self.failed,
        }
