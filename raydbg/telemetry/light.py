"""Light spans: cheap span objects for when raydbg's JSON lines are the only trace exporter.

The SDK's span costs ~25 µs on the caller (sampler, attribute validation and locks,
processor fan-out). With only the embedded exporter none of that is needed: a light
span is ids, times and a plain attribute dict, queued as is and encoded on the export
thread (`record()`). It is a real OpenTelemetry `Span` in the context, so SDK spans
(Ray's task hooks) and W3C propagation nest under it as under any span. Sampling is
OTel's default, parent-based always-on; `settings.Plan.light_spans` says when to use it.
"""

from __future__ import annotations

import random
import sys
import time
import traceback
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from contextvars import Token
from typing import Any

from opentelemetry import context as otel_context
from opentelemetry import trace
from opentelemetry.trace import (
    NonRecordingSpan,
    SpanContext,
    SpanKind,
    Status,
    StatusCode,
    TraceFlags,
    TraceState,
)

_NS = 1e-9
_SAMPLED_RANDOM = TraceFlags.SAMPLED | TraceFlags.RANDOM_TRACE_ID
_EMPTY_STATE = TraceState()
_KIND_NAMES = {k: k.name.lower() for k in SpanKind}
_getrandbits = random.getrandbits
_time_ns = time.time_ns
_get_current_span = trace.get_current_span
_set_span_in_context = trace.set_span_in_context
_attach, _detach = otel_context.attach, otel_context.detach


class LightSpan(trace.Span):
    """A recording span that only a JSON-lines exporter reads (see `record()`)."""

    __slots__ = (
        "name",
        "trace_id",
        "span_id",
        "parent_id",
        "flags",
        "trace_state",
        "kind",
        "start_ns",
        "end_ns",
        "attributes",
        "events",
        "status",
        "_ctx",
        "_sink",
    )

    def __init__(
        self,
        name: str,
        trace_id: int,
        parent_id: int,
        flags: int,
        trace_state: TraceState,
        attributes: dict[str, Any],
        sink: Callable[[Any], None],
        kind: SpanKind = SpanKind.INTERNAL,
        start_ns: int | None = None,
    ) -> None:
        self.name = name
        self.trace_id = trace_id
        self.span_id = _getrandbits(64)
        self.parent_id = parent_id
        self.flags = flags
        self.trace_state = trace_state
        self.kind = kind
        self.attributes = attributes
        self.events: list[tuple[str, int, dict[str, Any]]] | None = None
        self.status: Status | None = None
        self._ctx: SpanContext | None = None
        self._sink = sink
        self.end_ns = 0
        self.start_ns = start_ns or _time_ns()

    def get_span_context(self) -> SpanContext:
        # Built on demand: most light spans are never asked (only children of SDK spans,
        # propagation and user code ask).
        ctx = self._ctx
        if ctx is None:
            ctx = self._ctx = SpanContext(
                self.trace_id, self.span_id, False, TraceFlags(self.flags), self.trace_state
            )
        return ctx

    def is_recording(self) -> bool:
        return not self.end_ns

    def end(self, end_time: int | None = None) -> None:
        if self.end_ns:
            return
        self.end_ns = end_time or _time_ns()
        self._sink(self)

    def set_attribute(self, key: str, value: Any) -> None:
        if not self.end_ns:
            self.attributes[key] = value

    def set_attributes(self, attributes: Mapping[str, Any]) -> None:
        if not self.end_ns:
            self.attributes.update(attributes)

    def add_event(
        self,
        name: str,
        attributes: Mapping[str, Any] | None = None,
        timestamp: int | None = None,
    ) -> None:
        if self.end_ns:
            return
        if self.events is None:
            self.events = []
        self.events.append((name, timestamp or _time_ns(), dict(attributes or {})))

    def update_name(self, name: str) -> None:
        if not self.end_ns:
            self.name = name

    def set_status(self, status: Status | StatusCode, description: str | None = None) -> None:
        if self.end_ns:
            return
        self.status = status if isinstance(status, Status) else Status(status, description)

    def record_exception(
        self,
        exception: BaseException,
        attributes: Mapping[str, Any] | None = None,
        timestamp: int | None = None,
        escaped: bool = False,
    ) -> None:
        # The same event the SDK records (OTel's exception semantic conventions).
        cls = type(exception)
        module = cls.__module__
        attrs: dict[str, Any] = {
            "exception.type": f"{module}.{cls.__qualname__}"
            if module and module != "builtins"
            else cls.__qualname__,
            "exception.message": str(exception),
            "exception.stacktrace": "".join(traceback.format_exception(exception)),
            "exception.escaped": str(escaped),
        }
        if attributes:
            attrs.update(attributes)
        self.add_event("exception", attrs, timestamp)

    def record(self) -> dict[str, Any]:
        """The JSON-lines record (same shape as `jsonl.span_record` gives an SDK span)."""
        start, end = self.start_ns * _NS, self.end_ns * _NS
        status = self.status
        rec: dict[str, Any] = {
            "type": "span",
            "name": self.name,
            "trace_id": format(self.trace_id, "032x"),
            "span_id": format(self.span_id, "016x"),
            "parent_id": format(self.parent_id, "016x") if self.parent_id else None,
            "kind": _KIND_NAMES[self.kind],
            "start": start,
            "end": end,
            "duration": end - start,
            "status": status.status_code.name.lower() if status else "unset",
            "attributes": self.attributes,
        }
        if status is not None and status.description:
            rec["status_message"] = status.description
        if self.events:
            rec["events"] = [
                {"name": n, "ts": ts * _NS, "attributes": a} for n, ts, a in self.events
            ]
        return rec

    def __repr__(self) -> str:
        return f"LightSpan({self.name!r}, span_id={self.span_id:016x})"


def attach(span: trace.Span) -> Token[otel_context.Context]:
    """Make `span` the current span (OpenTelemetry's public context API); token for `detach`."""
    return _attach(_set_span_in_context(span))


def detach(token: Token[otel_context.Context]) -> None:
    _detach(token)


class LightTracer(trace.Tracer):
    """Makes `LightSpan`s; `sink` takes each ended span (the bounded processor's `on_end`).

    `extra()` gives attributes stamped at start (the Ray ids), after the caller's, as the
    SDK's on-start processor does; it is only asked once module `extra_needs` is imported.
    """

    def __init__(
        self,
        sink: Callable[[Any], None],
        extra: Callable[[], Mapping[str, Any]] | None = None,
        extra_needs: str | None = "ray",
    ) -> None:
        self._sink = sink
        self._extra = extra
        self._extra_needs = extra_needs

    def start(
        self,
        name: str,
        attrs: dict[str, Any],
        context: otel_context.Context | None = None,
        kind: SpanKind = SpanKind.INTERNAL,
        start_time: int | None = None,
    ) -> trace.Span:
        """`start_span` for raydbg's API: takes ownership of `attrs` (no copy)."""
        parent = _get_current_span(context)
        if type(parent) is LightSpan:  # the common case: no SpanContext to build or read
            trace_id, parent_id = parent.trace_id, parent.span_id
            flags, state = parent.flags, parent.trace_state
        elif parent is None or not isinstance(parent, trace.Span):
            trace_id, parent_id = _getrandbits(128), 0
            flags, state = _SAMPLED_RANDOM, _EMPTY_STATE
        else:
            pctx = parent.get_span_context()
            if not pctx.is_valid:
                trace_id, parent_id = _getrandbits(128), 0
                flags, state = _SAMPLED_RANDOM, _EMPTY_STATE
            elif not pctx.trace_flags.sampled:  # parent-based: follow the caller's "no"
                return NonRecordingSpan(
                    SpanContext(
                        pctx.trace_id, _getrandbits(64), False, pctx.trace_flags, pctx.trace_state
                    )
                )
            else:
                trace_id, parent_id = pctx.trace_id, pctx.span_id
                flags = TraceFlags.SAMPLED | (pctx.trace_flags & TraceFlags.RANDOM_TRACE_ID)
                state = pctx.trace_state
        if self._extra is not None and (
            self._extra_needs is None or self._extra_needs in sys.modules
        ):
            extra = self._extra()
            if extra:
                attrs.update(extra)
        return LightSpan(
            name, trace_id, parent_id, flags, state, attrs, self._sink, kind, start_time
        )

    def start_span(
        self,
        name: str,
        context: otel_context.Context | None = None,
        kind: SpanKind = SpanKind.INTERNAL,
        attributes: Mapping[str, Any] | None = None,
        links: Sequence[trace.Link] | None = None,
        start_time: int | None = None,
        record_exception: bool = True,
        set_status_on_exception: bool = True,
    ) -> trace.Span:
        return self.start(name, dict(attributes or {}), context, kind, start_time)

    @contextmanager
    def start_as_current_span(  # type: ignore[override]
        self,
        name: str,
        context: otel_context.Context | None = None,
        kind: SpanKind = SpanKind.INTERNAL,
        attributes: Mapping[str, Any] | None = None,
        links: Sequence[trace.Link] | None = None,
        start_time: int | None = None,
        record_exception: bool = True,
        set_status_on_exception: bool = True,
        end_on_exit: bool = True,
    ) -> Iterator[trace.Span]:
        sp = self.start_span(name, context, kind, attributes, links, start_time)
        with trace.use_span(
            sp,
            end_on_exit=end_on_exit,
            record_exception=record_exception,
            set_status_on_exception=set_status_on_exception,
        ) as s:
            yield s
