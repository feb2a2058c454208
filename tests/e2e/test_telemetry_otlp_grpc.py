"""OTLP over gRPC (OTEL_EXPORTER_OTLP_PROTOCOL=grpc) to a real grpcio receiver on loopback:
spans and metrics arrive decoded with their attributes, across a Ray task; the per-signal
protocol variables pick gRPC for one signal only. (Unreachable gRPC endpoints:
test_telemetry_embedded.py::test_unreachable_exporter_never_blocks.)"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from collections.abc import Iterator

import pytest
from telemetry_otlp import (
    RAY_SPANS,
    GrpcReceiver,
    HttpReceiver,
    check_ray_trace,
    run_ray_driver,
    wait_until,
)


@pytest.fixture
def grpc_receiver() -> Iterator[GrpcReceiver]:
    r = GrpcReceiver()
    yield r
    r.close()


@pytest.mark.e2e
def test_grpc_spans_and_metrics_cross_ray_task_boundary(grpc_receiver: GrpcReceiver) -> None:
    r = grpc_receiver
    env = {
        "OTEL_EXPORTER_OTLP_ENDPOINT": f"http://127.0.0.1:{r.port}",
        "OTEL_EXPORTER_OTLP_PROTOCOL": "grpc",
        "OTEL_METRIC_EXPORT_INTERVAL": "500",
    }
    info = run_ray_driver(
        env,
        lambda _info: (
            RAY_SPANS <= r.span_names()
            and {"test.task.calls", "test.driver.wait"} <= r.metric_names()
        ),
    )
    with r.lock:
        spans = list(r.spans)
    check_ray_trace(spans, info)
    kind, calls = r.last_point("test.task.calls")
    assert kind == "sum" and calls["value"] == 1 and calls["attributes"] == {"test.arg": 7}
    assert calls["resource"]["raydbg.process"] == "worker"
    kind, wait = r.last_point("test.driver.wait")
    assert kind == "histogram" and wait["count"] == 1 and wait["sum"] == 0.25
    assert wait["attributes"] == {"phase": "get"}


EMIT = textwrap.dedent(
    """
    from raydbg import telemetry as tm
    assert tm.setup("driver")
    with tm.span("test.grpc.span", attributes={"test.n": 3}):
        tm.counter("test.grpc.count", "{x}").add(2, kind="a")
    assert tm.flush()
    """
)


def test_per_signal_protocol_picks_grpc_for_traces_only(grpc_receiver: GrpcReceiver) -> None:
    http = HttpReceiver()
    try:
        env = {
            **os.environ,
            "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": f"http://127.0.0.1:{grpc_receiver.port}",
            "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL": "grpc",
            "OTEL_EXPORTER_OTLP_METRICS_ENDPOINT": f"http://127.0.0.1:{http.port}/v1/metrics",
            "OTEL_EXPORTER_OTLP_PROTOCOL": "http/protobuf",
        }
        out = subprocess.run(
            [sys.executable, "-c", EMIT], env=env, capture_output=True, text=True, timeout=60
        )
        assert out.returncode == 0, out.stderr
        assert wait_until(lambda: "test.grpc.count" in http.metric_names(), 10)
        (span,) = grpc_receiver.spans
        assert span["name"] == "test.grpc.span" and span["attributes"] == {"test.n": 3}
        assert span["resource"]["raydbg.process"] == "driver"
        assert not grpc_receiver.points and not http.spans  # each signal went one way only
        kind, point = http.last_point("test.grpc.count")
        assert kind == "sum" and point["value"] == 2 and point["attributes"] == {"kind": "a"}
    finally:
        http.close()
