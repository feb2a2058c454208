"""The small span/metric API the rest of raydbg calls: `span`, `counter`, `histogram`, `gauge`.

Cheap when telemetry is off: every call first reads `state.tracer` / `.meter` and returns
at once when it is None. In a process nobody set up, the first call decides once
(`state.decide`: on where raydbg is active; only then is the SDK imported, by provider.py).
Instruments may be created at import time, before
`setup()`; they bind to the real meter on first use after it. Thread-safe.
"""

from __future__ import annotations

import functools
import inspect
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from typing import Any, TypeVar

from opentelemetry import context as otel_context
from opentelemetry import trace
from opentelemetry.trace import Status, StatusCode

from raydbg.telemetry.state import decide, state

F = TypeVar("F", bound=Callable[..., Any])


def auto_setup() -> bool:
    """provider.auto_setup, with the SDK imported only where the decision is to set up."""
    if not decide():
        return state.tracer is not None
    from raydbg.telemetry.provider import setup_decided

    return setup_decided()


# Seconds buckets for `unit="s"` histograms: 1 ms .. 10 min (OTel's default is for ms).
SECONDS_BUCKETS = (
    0.001,
    0.005,
    0.01,
    0.025,
    0.05,
    0.1,
    0.25,
    0.5,
    1,
    2.5,
    5,
    10,
    30,
    60,
    120,
    300,
    600,
)
_NOOP = trace.INVALID_SPAN
_PRIMITIVE = frozenset({str, bool, int, float})


def _clean(attributes: Mapping[str, Any] | None, attrs: Mapping[str, Any]) -> dict[str, Any]:
    """OTel takes str/bool/int/float (and lists of them): drop None, stringify the rest."""
    merged = {**attributes, **attrs} if attributes else attrs
    for v in merged.values():  # a loop, not all(<genexpr>): fewer frames on the hot path
        if type(v) not in _PRIMITIVE:
            break
    else:
        return dict(merged)  # the common case: nothing to clean
    out: dict[str, Any] = {}
    for k, v in merged.items():
        if v is None:
            continue
        if isinstance(v, str | bool | int | float):
            out[k] = v
        elif isinstance(v, list | tuple) and all(
            isinstance(x, str | bool | int | float) for x in v
        ):
            out[k] = list(v)
        else:
            out[k] = str(v)
    return out


STEP_SPAN_SUFFIX = ".train.step"  # a finished training step is progress for hang detection


def _step_progress(attributes: Mapping[str, Any] | None) -> None:
    from raydbg.progress_records import beat  # one pwrite (docs/hangs.md)

    step = (attributes or {}).get("train.step")
    beat(step if isinstance(step, int) else None, "span")


class span:  # noqa: N801 - used like a function: `with span(...)`, `@span(...)`
    """A span as a context manager (`with span("x", k=v) as s:`) or a decorator (`@span("x")`).

    Dotted attribute names go in `attributes={...}`; keyword arguments are added too.
    An exception leaving the block is recorded on the span and sets its status to error.
    """

    __slots__ = ("name", "_attributes", "_attrs", "_span", "_token")

    def __init__(
        self, name: str, attributes: Mapping[str, Any] | None = None, **attrs: Any
    ) -> None:
        self.name = name
        self._attributes = attributes
        self._attrs = attrs
        self._span: Any = None
        self._token: Any = None

    def __enter__(self) -> trace.Span:
        tracer = state.tracer
        if tracer is None:
            if state.auto is not None or not auto_setup() or state.tracer is None:
                return _NOOP
            tracer = state.tracer
        attrs = _clean(self._attributes, self._attrs) if self._attributes or self._attrs else {}
        # start_span + attach directly: about a third cheaper than start_as_current_span.
        sp = tracer.start_span(self.name, attributes=attrs)
        self._span = sp
        self._token = otel_context.attach(trace.set_span_in_context(sp))
        return sp

    def __exit__(self, exc_type: Any, exc: BaseException | None, tb: Any) -> None:
        if exc is None and self.name.endswith(STEP_SPAN_SUFFIX):
            _step_progress(self._attributes)
        sp, self._span = self._span, None
        if sp is None:
            return
        if exc is not None:
            sp.record_exception(exc)
            sp.set_status(Status(StatusCode.ERROR, f"{type(exc).__name__}: {exc}"))
        sp.end()
        otel_context.detach(self._token)

    def __call__(self, fn: F) -> F:
        name, attributes, attrs = self.name, self._attributes, self._attrs
        if inspect.iscoroutinefunction(fn):

            @functools.wraps(fn)
            async def awrapper(*a: Any, **kw: Any) -> Any:
                with span(name, attributes, **attrs):
                    return await fn(*a, **kw)

            return awrapper  # type: ignore[return-value]

        @functools.wraps(fn)
        def wrapper(*a: Any, **kw: Any) -> Any:
            if state.tracer is None and state.auto is not None:
                return fn(*a, **kw)
            with span(name, attributes, **attrs):
                return fn(*a, **kw)

        return wrapper  # type: ignore[return-value]


def current_span() -> trace.Span:
    """The active span (a no-op span when there is none), e.g. to add attributes or events."""
    return trace.get_current_span() if state.tracer is not None else _NOOP


class _Instrument:
    kind = ""
    __slots__ = ("name", "unit", "description", "_inst", "_gen")

    def __init__(self, name: str, unit: str = "", description: str = "") -> None:
        self.name, self.unit, self.description = name, unit, description
        self._inst: Any = None
        self._gen = -1

    def _get(self) -> Any:
        if state.meter is None and (state.auto is not None or not auto_setup()):
            return None
        if self._gen != state.generation:
            with _lock:
                if self._gen != state.generation and state.meter is not None:
                    self._inst = self._create(state.meter)
                    self._gen = state.generation
        return self._inst

    def _create(self, meter: Any) -> Any:
        raise NotImplementedError


class Counter(_Instrument):
    """Monotonic sum: `add(1, reason="rss")`."""

    kind = "counter"
    __slots__ = ()

    def _create(self, meter: Any) -> Any:
        return meter.create_counter(self.name, self.unit, self.description)

    def add(
        self, amount: float = 1, attributes: Mapping[str, Any] | None = None, **attrs: Any
    ) -> None:
        inst = self._inst if self._gen == state.generation else self._get()
        if inst is not None and state.meter is not None:
            inst.add(amount, _clean(attributes, attrs) if attributes or attrs else None)


class UpDownCounter(Counter):
    """Sum that can go down (things in flight): `add(-1)`."""

    kind = "updowncounter"
    __slots__ = ()

    def _create(self, meter: Any) -> Any:
        return meter.create_up_down_counter(self.name, self.unit, self.description)


class Histogram(_Instrument):
    """Distribution: `record(0.12, stage="decode")`; `with h.time(): ...` records seconds."""

    kind = "histogram"
    __slots__ = ()

    def _create(self, meter: Any) -> Any:
        bounds = SECONDS_BUCKETS if self.unit == "s" else None
        return meter.create_histogram(
            self.name, self.unit, self.description, explicit_bucket_boundaries_advisory=bounds
        )

    def record(
        self, value: float, attributes: Mapping[str, Any] | None = None, **attrs: Any
    ) -> None:
        # _get() inlined, and no attribute dict to clean in the common case: a histogram
        # record often runs right after a model step, where every extra call is a cache miss.
        inst = self._inst if self._gen == state.generation else self._get()
        if inst is not None and state.meter is not None:
            inst.record(value, _clean(attributes, attrs) if attributes or attrs else None)

    @contextmanager
    def time(self, attributes: Mapping[str, Any] | None = None, **attrs: Any) -> Iterator[None]:
        t0 = time.perf_counter()
        try:
            yield
        finally:
            self.record(time.perf_counter() - t0, attributes, **attrs)


class Gauge(_Instrument):
    """Last value wins: `set(bytes_used, node="...")`."""

    kind = "gauge"
    __slots__ = ()

    def _create(self, meter: Any) -> Any:
        return meter.create_gauge(self.name, self.unit, self.description)

    def set(self, value: float, attributes: Mapping[str, Any] | None = None, **attrs: Any) -> None:
        inst = self._inst if self._gen == state.generation else self._get()
        if inst is not None and state.meter is not None:
            inst.set(value, _clean(attributes, attrs) if attributes or attrs else None)


_lock = threading.Lock()
_instruments: dict[str, _Instrument] = {}


def _instrument(cls: type[_Instrument], name: str, unit: str, description: str) -> Any:
    if not isinstance(unit, str) or not isinstance(description, str):
        # A common slip: histogram(name, value). Fail loudly instead of making a bad instrument.
        raise TypeError(
            f"{cls.kind}({name!r}, unit, description) takes strings; record values "
            f"on the returned object: {cls.kind}(name, unit).record(value)"
        )
    with _lock:
        inst = _instruments.get(name)
        if inst is None:
            inst = _instruments[name] = cls(name, unit, description)
    if type(inst) is not cls:
        raise ValueError(f"metric {name!r} already exists as a {inst.kind}")
    return inst


def counter(name: str, unit: str = "1", description: str = "") -> Counter:
    """A counter (same object for the same name). Units follow UCUM: `s`, `By`, `{kill}`."""
    return _instrument(Counter, name, unit, description)  # type: ignore[no-any-return]


def up_down_counter(name: str, unit: str = "1", description: str = "") -> UpDownCounter:
    return _instrument(UpDownCounter, name, unit, description)  # type: ignore[no-any-return]


def histogram(name: str, unit: str = "s", description: str = "") -> Histogram:
    return _instrument(Histogram, name, unit, description)  # type: ignore[no-any-return]


def gauge(name: str, unit: str = "1", description: str = "") -> Gauge:
    return _instrument(Gauge, name, unit, description)  # type: ignore[no-any-return]
