"""This process's telemetry state, what the API reads on every call, and the decision to set it up.

Imports no OpenTelemetry SDK: a process that emits while telemetry is off never loads it
(provider.py, which builds the SDK's providers, is imported only once telemetry goes on).
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from opentelemetry import metrics, trace

if TYPE_CHECKING:
    from opentelemetry.sdk.metrics import MeterProvider
    from opentelemetry.sdk.metrics.export import InMemoryMetricReader
    from opentelemetry.sdk.trace import TracerProvider

    from raydbg.telemetry.bounded import BoundedSpanProcessor
    from raydbg.telemetry.jsonl import JsonlFile
    from raydbg.telemetry.settings import Plan


@dataclass
class State:
    """Everything `setup()` built; `tracer is None` means telemetry is off (the cheap path)."""

    tracer: trace.Tracer | None = None
    meter: metrics.Meter | None = None
    generation: int = 0
    # None: nobody called setup() yet and the first emission decides (decide()).
    auto: bool | None = None
    kind: str = ""
    plan: Plan | None = None
    tracer_provider: TracerProvider | None = None
    meter_provider: MeterProvider | None = None
    processors: list[BoundedSpanProcessor] = field(default_factory=list)
    jsonl: JsonlFile | None = None
    # The live reader behind prometheus_text() (cumulative, read on each scrape).
    metric_reader: InMemoryMetricReader | None = None


state = State()
lock = threading.RLock()


def decide() -> bool:
    """At the first span or metric of a process nobody set up: True when telemetry should be
    set up now (raydbg is active here). Decided once: every later call, and a process
    that is off, gets False at the cost of a check."""
    with lock:
        if state.auto is not None or state.tracer is not None:
            return False
        state.auto = False  # decided; setup()'s own calls see the cheap path
    from raydbg import config

    return config.is_active()
