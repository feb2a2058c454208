"""Telemetry shim: the single place where sd_reference emits spans and metrics.

Uses `raydbg.telemetry` (span, histogram, counter; see docs/telemetry.md) when it is
importable; otherwise every call is a no-op. Telemetry must never break a training
run, so a failure inside the backend is swallowed.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Iterator, Mapping
from typing import Any

try:  # raydbg's telemetry is optional for this app
    from raydbg import telemetry as _telemetry
except Exception:  # noqa: BLE001 - any import problem means "no telemetry"
    _telemetry = None

# Histograms are seconds unless listed; counters count rows (docs/telemetry.md lists them all).
UNITS = {"sd.train.loss": "1", "sd.train.images_per_second": "{image}/s"}
_instruments: dict[str, Any] = {}


def setup() -> None:
    """Start telemetry in this process (driver, Train worker, Data worker); idempotent."""
    if _telemetry is not None:
        with contextlib.suppress(Exception):
            _telemetry.setup()


@contextlib.contextmanager
def span(name: str, attributes: Mapping[str, Any] | None = None, **attrs: Any) -> Iterator[None]:
    """Time a block as a span named `name` (e.g. "sd.train.step"); dotted keys go in `attributes`."""
    cm: Any = None
    if _telemetry is not None:
        try:
            cm = _telemetry.span(name, attributes, **attrs)
            cm.__enter__()
        except Exception:  # noqa: BLE001
            cm = None
    try:
        yield
    finally:
        if cm is not None:
            with contextlib.suppress(Exception):
                cm.__exit__(None, None, None)


def _instrument(kind: str, name: str) -> Any:
    inst = _instruments.get(name)
    if inst is None and _telemetry is not None:
        inst = _instruments[name] = getattr(_telemetry, kind)(name, UNITS.get(name, "s") if kind == "histogram" else "{row}")
    return inst


def histogram(name: str, value: float, **attrs: Any) -> None:
    """Record one value of a distribution (durations in s, loss, images/s)."""
    with contextlib.suppress(Exception):
        inst = _instrument("histogram", name)
        if inst is not None:
            inst.record(value, **attrs)


def counter(name: str, value: float = 1, **attrs: Any) -> None:
    """Add `value` to a monotonic row counter (rows in/out, rows dropped)."""
    with contextlib.suppress(Exception):
        inst = _instrument("counter", name)
        if inst is not None:
            inst.add(value, **attrs)


class Timer:
    """Accumulates named durations for one step; each part is also a span and a histogram.

    A GPU runs its queued work after the host has moved on: host-side times measure
    launches. With `sync` (the device's synchronise) each part waits for the device
    before it starts and before it ends, so the times are the device's; that wait
    costs throughput, so it is only done where timing is asked for.
    """

    def __init__(self, prefix: str, attributes: Mapping[str, Any] | None = None,
                 sync: Callable[[], None] | None = None) -> None:
        self.prefix = prefix
        self.attributes = dict(attributes or {})
        self.sync = sync
        self.seconds: dict[str, float] = {}

    @contextlib.contextmanager
    def timed(self, part: str) -> Iterator[None]:
        if self.sync is not None:
            self.sync()
        start = time.perf_counter()
        with span(f"{self.prefix}.{part}", self.attributes):
            yield
            if self.sync is not None:
                self.sync()
        elapsed = time.perf_counter() - start
        self.seconds[part] = self.seconds.get(part, 0.0) + elapsed
        histogram(f"{self.prefix}.{part}.duration", elapsed)
