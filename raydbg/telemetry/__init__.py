"""raydbg's telemetry API: OpenTelemetry set-up once per process plus small span/metric helpers.

Usage (see docs/telemetry.md for every span and metric name)::

    from raydbg import telemetry

    telemetry.setup("agent")            # once per process; idempotent; cheap no-op API before
    KILLS = telemetry.counter("raydbg.memory.kills", "{kill}", "Workers killed")
    with telemetry.span("raydbg.session.pause", reason="breakpoint"):
        ...
    KILLS.add(1, reason="node_memory")

Importing this package imports nothing heavy; the API imports OpenTelemetry on first use,
never Ray, and connects nothing.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from raydbg.telemetry.api import (
        SECONDS_BUCKETS,
        Counter,
        Gauge,
        Histogram,
        UpDownCounter,
        counter,
        current_span,
        gauge,
        histogram,
        span,
        up_down_counter,
    )
    from raydbg.telemetry.provider import flush, setup, shutdown, stats
    from raydbg.telemetry.ray_tracing import ray_init_kwargs

# Loaded on first use (PEP 562), so raydbg's worker hook can import `ray_tracing` and
# `settings` without OpenTelemetry (~130 ms at a worker's start).
_LAZY = {
    **dict.fromkeys(
        ("SECONDS_BUCKETS", "Counter", "Gauge", "Histogram", "UpDownCounter", "counter",
         "current_span", "gauge", "histogram", "span", "up_down_counter"),
        "api",
    ),
    **dict.fromkeys(("flush", "setup", "shutdown", "stats"), "provider"),
    "ray_init_kwargs": "ray_tracing",
}


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'raydbg.telemetry' has no attribute {name!r}")
    value = getattr(importlib.import_module(f"raydbg.telemetry.{module}"), name)
    globals()[name] = value  # later lookups are plain module attributes
    return value


def enabled() -> bool:
    """True once `setup()` has run in this process (and telemetry is not switched off)."""
    from raydbg.telemetry.state import state

    return state.tracer is not None


def runtime_env_vars() -> dict[str, str]:
    """`OTEL_*` and `RAYDBG_TELEMETRY*` variables of this process, for a job's runtime_env."""
    import os

    from raydbg.telemetry.settings import carried_env

    return carried_env(os.environ)


def prometheus_text() -> bytes:
    """Prometheus text exposition of this process's raydbg metrics (plus other processes on
    this node that write the embedded JSON lines). See `raydbg.telemetry.prometheus`."""
    from raydbg.telemetry.prometheus import prometheus_text as _text

    return _text()


__all__ = [
    "SECONDS_BUCKETS",
    "Counter",
    "Gauge",
    "Histogram",
    "UpDownCounter",
    "counter",
    "current_span",
    "enabled",
    "flush",
    "gauge",
    "histogram",
    "prometheus_text",
    "ray_init_kwargs",
    "runtime_env_vars",
    "setup",
    "shutdown",
    "span",
    "stats",
    "up_down_counter",
]
