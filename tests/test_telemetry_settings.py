"""Exporter selection from OTEL_* variables (pure) and the exporters `build()` makes from it."""

from __future__ import annotations

from pathlib import Path

import pytest

from raydbg.telemetry import provider
from raydbg.telemetry.settings import carried_env, read_plan


def test_no_variables_means_embedded_jsonl() -> None:
    plan = read_plan({})
    assert plan.enabled and plan.traces == ("jsonl",) and plan.metrics == ("jsonl",)
    assert plan.schedule_delay_s == 1.0


def test_otlp_endpoint_alone_selects_otlp() -> None:
    plan = read_plan({"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:4318"})
    assert plan.traces == ("otlp",) and plan.metrics == ("otlp",)
    assert plan.schedule_delay_s == 5.0  # OTel's default for remote exporters


def test_per_signal_endpoint_only_switches_that_signal() -> None:
    plan = read_plan({"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://x:4318/v1/traces"})
    assert plan.traces == ("otlp",) and plan.metrics == ("jsonl",)


def test_explicit_lists_none_and_unknown_names() -> None:
    plan = read_plan(
        {
            "OTEL_TRACES_EXPORTER": "console, jsonl,console,zipkin",
            "OTEL_METRICS_EXPORTER": "none",
        }
    )
    assert plan.traces == ("console", "jsonl")
    assert plan.metrics == ()
    assert any("zipkin" in w for w in plan.warnings)
    assert not read_plan({"OTEL_TRACES_EXPORTER": "none"}).tracing


@pytest.mark.parametrize(
    "env",
    [{"RAYDBG_TELEMETRY": "0"}, {"OTEL_SDK_DISABLED": "true"}, {"RAYDBG_TELEMETRY": "off"}],
)
def test_switched_off(env: dict[str, str]) -> None:
    assert not read_plan(env).enabled


def test_grpc_without_its_package_falls_back_to_embedded() -> None:
    env = {"OTEL_EXPORTER_OTLP_ENDPOINT": "http://h:4317", "OTEL_EXPORTER_OTLP_PROTOCOL": "grpc"}
    plan = read_plan(env, has_grpc=False)
    assert plan.traces == ("jsonl",) and plan.metrics == ("jsonl",)
    assert any("grpc" in w.lower() for w in plan.warnings)
    assert read_plan(env, has_grpc=True).traces == ("otlp",)


def test_limits_from_standard_variables() -> None:
    plan = read_plan(
        {
            "OTEL_BSP_MAX_QUEUE_SIZE": "7",
            "OTEL_BSP_SCHEDULE_DELAY": "250",
            "OTEL_METRIC_EXPORT_INTERVAL": "1500",
            "OTEL_BSP_MAX_EXPORT_BATCH_SIZE": "garbage",
        }
    )
    assert plan.max_queue_size == 7 and plan.schedule_delay_s == 0.25
    assert plan.metric_interval_s == 1.5 and plan.max_export_batch_size == 512


def test_carried_env_picks_telemetry_variables_only() -> None:
    env = {"OTEL_SERVICE_NAME": "s", "RAYDBG_TELEMETRY_DIR": "/d", "PATH": "/bin", "RAY_DEBUG": "1"}
    assert carried_env(env) == {"OTEL_SERVICE_NAME": "s", "RAYDBG_TELEMETRY_DIR": "/d"}


def _exporter_types(env: dict[str, str], tmp_path: Path, module: bool = False) -> list[str]:
    built = provider.build(read_plan({**env, "RAYDBG_TELEMETRY_DIR": str(tmp_path)}), "test")
    try:
        return [
            type(p.exporter).__module__ if module else type(p.exporter).__name__
            for p in built.processors
        ]
    finally:
        for p in built.processors:
            p.shutdown(100)
        assert built.meter_provider is not None
        built.meter_provider.shutdown(100)


def test_build_makes_the_selected_exporters(tmp_path: Path) -> None:
    assert _exporter_types({}, tmp_path) == ["JsonlSpanExporter"]
    otlp = {"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:9"}
    assert _exporter_types(otlp, tmp_path) == ["OTLPSpanExporter"]
    both = {"OTEL_TRACES_EXPORTER": "otlp,console,jsonl"}
    assert _exporter_types(both, tmp_path) == [
        "OTLPSpanExporter",
        "ConsoleSpanExporter",
        "JsonlSpanExporter",
    ]
    assert all(p.name.startswith("test-") for p in tmp_path.iterdir())


def test_grpc_protocol_builds_the_grpc_exporter(tmp_path: Path) -> None:
    env = {
        "OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:9",
        "OTEL_EXPORTER_OTLP_PROTOCOL": "grpc",
    }
    assert read_plan(env).warnings == ()  # the package is a dependency: no fallback
    assert _exporter_types(env, tmp_path, module=True) == [
        "opentelemetry.exporter.otlp.proto.grpc.trace_exporter"
    ]
    metrics_only = read_plan({"OTEL_EXPORTER_OTLP_METRICS_PROTOCOL": "grpc"})
    assert (metrics_only.traces_protocol, metrics_only.metrics_protocol) == (
        "http/protobuf",
        "grpc",
    )
    per_signal = {**env, "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL": "http/protobuf"}
    assert _exporter_types(per_signal, tmp_path, module=True) == [
        "opentelemetry.exporter.otlp.proto.http.trace_exporter"
    ]


def test_exemplars_only_when_something_reads_them() -> None:
    assert not read_plan({}).exemplars
    assert read_plan({"OTEL_EXPORTER_OTLP_ENDPOINT": "http://h:4318"}).exemplars
    assert read_plan({"OTEL_METRICS_EXEMPLAR_FILTER": "always_on"}).exemplars
