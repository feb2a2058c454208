"""OTLP over HTTP to a loopback receiver (real protobuf decoding) with a real Ray cluster:
the driver's span is the ancestor of the task's and the actor method's spans, in one trace.
(gRPC: test_telemetry_otlp_grpc.py; the shared receivers and driver: telemetry_otlp.py.)"""

from __future__ import annotations

import json
from collections.abc import Iterator

import pytest
from telemetry_otlp import RAY_SPANS, HttpReceiver, check_ray_trace, run_ray_driver

from raydbg.private_dir import session_path

pytestmark = pytest.mark.e2e


@pytest.fixture(scope="module")
def receiver() -> Iterator[HttpReceiver]:
    r = HttpReceiver()
    yield r
    r.close()


def test_spans_cross_ray_task_boundary(
    receiver: HttpReceiver, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("RAYDBG_TELEMETRY_DIR", raising=False)
    env = {
        "OTEL_EXPORTER_OTLP_ENDPOINT": f"http://127.0.0.1:{receiver.port}",
        "OTEL_TRACES_EXPORTER": "otlp,jsonl",  # the embedded files too, in the session dir
        "OTEL_METRIC_EXPORT_INTERVAL": "500",
    }
    info = run_ray_driver(
        env,
        lambda _info: (
            RAY_SPANS <= receiver.span_names() and "test.task.calls" in receiver.metric_names()
        ),
    )
    with receiver.lock:
        spans = list(receiver.spans)
    check_ray_trace(spans, info)
    kind, point = receiver.last_point("test.task.calls")
    assert kind == "sum" and point["value"] == 1 and point["attributes"] == {"test.arg": 7}

    # The embedded default wrote in our folder of the Ray session, one file per process.
    tdir = session_path(info["session"], "telemetry")
    worker_file = tdir / f"worker-{info['pid']}.jsonl"
    assert worker_file.exists(), list(tdir.iterdir()) if tdir.exists() else tdir
    recs = [json.loads(x) for x in worker_file.read_text().splitlines()]
    assert any(r.get("name") == "test.task.child" for r in recs)
    driver_files = [
        p for p in tdir.iterdir() if p.name.startswith("driver-") and p.suffix == ".jsonl"
    ]
    assert len(driver_files) == 1
    names = {json.loads(x).get("name") for x in driver_files[0].read_text().splitlines()}
    assert {"test.driver.parent", "test.driver.after_shutdown"} <= names
