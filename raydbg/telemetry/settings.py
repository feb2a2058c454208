"""Reads the standard `OTEL_*` variables (and `RAYDBG_TELEMETRY*`) into an export plan.

Pure: takes a mapping (normally `os.environ`) and returns a `Plan`; no OpenTelemetry
or Ray import, so exporter selection is unit-tested without either.
"""

from __future__ import annotations

import importlib.util
from collections.abc import Mapping
from dataclasses import dataclass, field

# Exporter names accepted in OTEL_TRACES_EXPORTER / OTEL_METRICS_EXPORTER.
# `jsonl` is raydbg's embedded default (JSON lines under the Ray session directory).
TRACE_EXPORTERS = ("otlp", "console", "jsonl", "none")
METRIC_EXPORTERS = ("otlp", "console", "jsonl", "prometheus", "none")
_TRUE = ("1", "true", "yes", "on")
_FALSE = ("0", "false", "no", "off")


@dataclass(frozen=True)
class Plan:
    """What `setup()` builds: which exporters, with what limits."""

    enabled: bool = True
    traces: tuple[str, ...] = ("jsonl",)
    metrics: tuple[str, ...] = ("jsonl",)
    traces_protocol: str = "http/protobuf"
    metrics_protocol: str = "http/protobuf"
    max_queue_size: int = 2048
    max_export_batch_size: int = 512
    schedule_delay_s: float = 1.0
    export_timeout_s: float = 10.0
    metric_interval_s: float = 10.0
    metric_timeout_s: float = 5.0
    jsonl_dir: str | None = None
    jsonl_max_bytes: int = 32 * 1024 * 1024
    jsonl_backups: int = 3
    exemplars: bool = False
    warnings: tuple[str, ...] = field(default=())

    @property
    def tracing(self) -> bool:
        """Spans are recorded somewhere (so trace context is worth propagating)."""
        return self.enabled and bool(self.traces)


def _float(env: Mapping[str, str], name: str, default: float, scale: float = 1.0) -> float:
    raw = env.get(name, "").strip()
    try:
        return float(raw) * scale if raw else default
    except ValueError:
        return default


def _int(env: Mapping[str, str], name: str, default: int) -> int:
    raw = env.get(name, "").strip()
    try:
        return max(1, int(raw)) if raw else default
    except ValueError:
        return default


def grpc_available() -> bool:
    """The OTLP gRPC exporter is optional: only used when its package is installed."""
    try:
        return importlib.util.find_spec("opentelemetry.exporter.otlp.proto.grpc") is not None
    except (ImportError, ValueError):
        return False


def _exporters(
    env: Mapping[str, str], signal: str, allowed: tuple[str, ...], warnings: list[str]
) -> tuple[str, ...]:
    raw = env.get(f"OTEL_{signal.upper()}_EXPORTER", "").strip().lower()
    if not raw:
        # With no exporter named, an OTLP endpoint means OTLP (as the OTel SDK does);
        # with none of either, the embedded default.
        endpoint = env.get("OTEL_EXPORTER_OTLP_ENDPOINT") or env.get(
            f"OTEL_EXPORTER_OTLP_{signal.upper()}_ENDPOINT"
        )
        return ("otlp",) if endpoint else ("jsonl",)
    names: list[str] = []
    for name in (n.strip() for n in raw.split(",")):
        if name == "none":
            return ()
        if name not in allowed:
            warnings.append(f"OTEL_{signal.upper()}_EXPORTER={name!r} is not supported; ignored")
        elif name not in names:
            names.append(name)
    return tuple(names)


def _protocol(env: Mapping[str, str], signal: str) -> str:
    raw = env.get(f"OTEL_EXPORTER_OTLP_{signal.upper()}_PROTOCOL") or env.get(
        "OTEL_EXPORTER_OTLP_PROTOCOL", "http/protobuf"
    )
    return raw.strip().lower() or "http/protobuf"


def _grpc_fallback(
    names: tuple[str, ...], protocol: str, signal: str, has_grpc: bool, warnings: list[str]
) -> tuple[str, ...]:
    if "otlp" not in names or protocol != "grpc" or has_grpc:
        return names
    warnings.append(
        f"OTLP/gRPC for {signal} needs opentelemetry-exporter-otlp-proto-grpc, which is not "
        "installed; writing the embedded JSON lines instead (pip install it, or set "
        "OTEL_EXPORTER_OTLP_PROTOCOL=http/protobuf)"
    )
    return tuple(dict.fromkeys("jsonl" if n == "otlp" else n for n in names))


def read_plan(env: Mapping[str, str], has_grpc: bool | None = None) -> Plan:
    """Turn environment variables into a `Plan` (see docs/telemetry.md for the table)."""
    warnings: list[str] = []
    switch = env.get("RAYDBG_TELEMETRY", "").strip().lower()
    sdk_disabled = env.get("OTEL_SDK_DISABLED", "").strip().lower() in _TRUE
    enabled = switch not in _FALSE and not sdk_disabled
    traces = _exporters(env, "traces", TRACE_EXPORTERS, warnings)
    metrics = _exporters(env, "metrics", METRIC_EXPORTERS, warnings)
    tp, mp = _protocol(env, "traces"), _protocol(env, "metrics")
    if has_grpc is None and "grpc" in (tp, mp):
        has_grpc = grpc_available()
    traces = _grpc_fallback(traces, tp, "traces", bool(has_grpc), warnings)
    metrics = _grpc_fallback(metrics, mp, "metrics", bool(has_grpc), warnings)
    # The embedded writer flushes often (a crash loses little); OTLP keeps OTel's 5 s.
    default_delay = 1.0 if traces == ("jsonl",) else 5.0
    default_interval = 10.0 if "otlp" not in metrics else 60.0
    return Plan(
        enabled=enabled,
        traces=traces,
        metrics=metrics,
        traces_protocol=tp,
        metrics_protocol=mp,
        max_queue_size=_int(env, "OTEL_BSP_MAX_QUEUE_SIZE", 2048),
        max_export_batch_size=_int(env, "OTEL_BSP_MAX_EXPORT_BATCH_SIZE", 512),
        schedule_delay_s=_float(env, "OTEL_BSP_SCHEDULE_DELAY", default_delay, 1e-3),
        export_timeout_s=_float(env, "OTEL_BSP_EXPORT_TIMEOUT", 10.0, 1e-3),
        metric_interval_s=_float(env, "OTEL_METRIC_EXPORT_INTERVAL", default_interval, 1e-3),
        metric_timeout_s=_float(env, "OTEL_METRIC_EXPORT_TIMEOUT", 5.0, 1e-3),
        jsonl_dir=env.get("RAYDBG_TELEMETRY_DIR") or None,
        jsonl_max_bytes=_int(env, "RAYDBG_TELEMETRY_MAX_BYTES", 32 * 1024 * 1024),
        jsonl_backups=_int(env, "RAYDBG_TELEMETRY_BACKUPS", 3),
        # Exemplars only reach OTLP; sampling one under each span costs every update ~7 µs.
        exemplars="otlp" in metrics or bool(env.get("OTEL_METRICS_EXEMPLAR_FILTER")),
        warnings=tuple(warnings),
    )


def carried_env(env: Mapping[str, str]) -> dict[str, str]:
    """The telemetry variables a driver should hand to its workers (runtime_env env_vars);
    never OTLP headers or other secrets (config.is_secret: the runtime_env is public)."""
    from raydbg.config import is_secret

    return {
        k: v
        for k, v in env.items()
        if (k.startswith("OTEL_") or k.startswith("RAYDBG_TELEMETRY")) and not is_secret(k)
    }
