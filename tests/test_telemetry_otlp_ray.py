"""OTLP over HTTP to a loopback receiver (real protobuf decoding) with a real Ray cluster:
the driver's span is the ancestor of the task's and the actor method's spans, in one trace."""

from __future__ import annotations

import asyncio
import gzip
import json
import os
import subprocess
import sys
import textwrap
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from aiohttp import web
from opentelemetry.proto.collector.metrics.v1 import metrics_service_pb2
from opentelemetry.proto.collector.trace.v1 import trace_service_pb2
from opentelemetry.proto.common.v1.common_pb2 import AnyValue

pytestmark = pytest.mark.e2e


def _value(v: AnyValue) -> Any:
    return getattr(v, v.WhichOneof("value")) if v.WhichOneof("value") else None


class Receiver:
    """An OTLP/HTTP receiver on 127.0.0.1 (aiohttp in a thread) that keeps decoded requests."""

    def __init__(self) -> None:
        self.spans: list[dict[str, Any]] = []
        self.metric_names: set[str] = set()
        self.lock = threading.Lock()
        self.loop = asyncio.new_event_loop()
        self.port = 0
        ready = threading.Event()
        self.thread = threading.Thread(target=self._serve, args=(ready,), daemon=True)
        self.thread.start()
        assert ready.wait(10)

    def _serve(self, ready: threading.Event) -> None:
        app = web.Application()
        app.router.add_post("/v1/traces", self._traces)
        app.router.add_post("/v1/metrics", self._metrics)
        self.runner = web.AppRunner(app)
        self.loop.run_until_complete(self.runner.setup())
        site = web.TCPSite(self.runner, "127.0.0.1", 0)
        self.loop.run_until_complete(site.start())
        self.port = self.runner.addresses[0][1]
        ready.set()
        self.loop.run_forever()

    @staticmethod
    async def _body(request: web.Request) -> bytes:
        body = await request.read()
        assert request.content_type == "application/x-protobuf"
        return gzip.decompress(body) if request.headers.get("Content-Encoding") == "gzip" else body

    async def _traces(self, request: web.Request) -> web.Response:
        msg = trace_service_pb2.ExportTraceServiceRequest()
        msg.ParseFromString(await self._body(request))
        with self.lock:
            for rs in msg.resource_spans:
                resource = {kv.key: _value(kv.value) for kv in rs.resource.attributes}
                for ss in rs.scope_spans:
                    for s in ss.spans:
                        self.spans.append(
                            {
                                "name": s.name,
                                "trace_id": s.trace_id.hex(),
                                "span_id": s.span_id.hex(),
                                "parent_id": s.parent_span_id.hex() or None,
                                "kind": s.kind,
                                "attributes": {kv.key: _value(kv.value) for kv in s.attributes},
                                "resource": resource,
                            }
                        )
        body = trace_service_pb2.ExportTraceServiceResponse().SerializeToString()
        return web.Response(body=body, content_type="application/x-protobuf")

    async def _metrics(self, request: web.Request) -> web.Response:
        msg = metrics_service_pb2.ExportMetricsServiceRequest()
        msg.ParseFromString(await self._body(request))
        with self.lock:
            for rm in msg.resource_metrics:
                for sm in rm.scope_metrics:
                    self.metric_names.update(m.name for m in sm.metrics)
        body = metrics_service_pb2.ExportMetricsServiceResponse().SerializeToString()
        return web.Response(body=body, content_type="application/x-protobuf")

    def close(self) -> None:
        asyncio.run_coroutine_threadsafe(self.runner.cleanup(), self.loop).result(10)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(10)


@pytest.fixture(scope="module")
def receiver() -> Iterator[Receiver]:
    r = Receiver()
    yield r
    r.close()


DRIVER = textwrap.dedent(
    """
    import json, os, sys
    import ray
    from raydbg import telemetry as tm
    tm.setup("driver")
    ray.init(num_cpus=1, include_dashboard=False,
             runtime_env={"env_vars": tm.runtime_env_vars()}, **tm.ray_init_kwargs())

    @ray.remote(max_retries=0)
    def child(x):
        with tm.span("test.task.child", x=x):
            tm.counter("test.task.calls").add(1)
            return os.getpid()

    @ray.remote
    class Worker:
        def work(self):
            with tm.span("test.actor.child"):
                return os.getpid()

    with tm.span("test.driver.parent", attributes={"test.case": "ray"}):
        pid = ray.get(child.remote(7))
        actor = Worker.remote()
        ray.get(actor.work.remote())
    session = ray._private.worker._global_node.get_session_dir_path()
    print(json.dumps({"pid": pid, "session": session}), flush=True)
    sys.stdin.readline()  # the test says when it has seen every span
    ray.shutdown()
    with tm.span("test.driver.after_shutdown"):  # still goes to the session's files
        pass
    """
)


def _ancestors(span: dict[str, Any], by_id: dict[str, dict[str, Any]]) -> list[str]:
    names = []
    while span["parent_id"] in by_id:
        span = by_id[span["parent_id"]]
        names.append(span["name"])
    return names


def test_spans_cross_ray_task_boundary(receiver: Receiver, tmp_path: Path) -> None:
    env = {
        **os.environ,
        "OTEL_EXPORTER_OTLP_ENDPOINT": f"http://127.0.0.1:{receiver.port}",
        "OTEL_TRACES_EXPORTER": "otlp,jsonl",  # the embedded files too, in the session dir
        "OTEL_BSP_SCHEDULE_DELAY": "200",
        "OTEL_METRIC_EXPORT_INTERVAL": "500",
    }
    env.pop("RAYDBG_TELEMETRY_DIR", None)
    proc = subprocess.Popen(
        [sys.executable, "-c", DRIVER],
        env=env,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        line = proc.stdout.readline() if proc.stdout else ""
        assert line, proc.stderr.read() if proc.stderr else ""
        info = json.loads(line)
        wanted = {"test.driver.parent", "test.task.child", "test.actor.child"}
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            with receiver.lock:
                names = {s["name"] for s in receiver.spans}
                if wanted <= names and "test.task.calls" in receiver.metric_names:
                    break
            time.sleep(0.2)
        assert proc.stdin is not None
        proc.stdin.write("done\n")
        proc.stdin.flush()
        assert proc.wait(60) == 0, proc.stderr.read() if proc.stderr else ""
    finally:
        if proc.poll() is None:
            proc.kill()
    with receiver.lock:
        spans = list(receiver.spans)
        metric_names = set(receiver.metric_names)
    by_name = {s["name"]: s for s in spans}
    assert wanted <= set(by_name), sorted(by_name)
    assert "test.task.calls" in metric_names
    parent, task, actor = (
        by_name[n] for n in ("test.driver.parent", "test.task.child", "test.actor.child")
    )
    by_id = {s["span_id"]: s for s in spans}

    # One trace; the driver's span is an ancestor of both, through Ray's producer/consumer spans.
    assert task["trace_id"] == parent["trace_id"] == actor["trace_id"]
    task_chain = _ancestors(task, by_id)
    assert task_chain[-1] == "test.driver.parent", task_chain
    assert task_chain[0].endswith("child ray.remote_worker") and task_chain[1].endswith(
        "ray.remote"
    )
    assert _ancestors(actor, by_id)[-1] == "test.driver.parent"

    # Attributes and resources name the process, job, task and actor.
    assert parent["attributes"]["test.case"] == "ray"
    assert parent["resource"]["raydbg.process"] == "driver"
    assert task["resource"]["raydbg.process"] == "worker"
    assert task["resource"]["process.pid"] == info["pid"]
    assert task["attributes"]["x"] == 7 and task["attributes"]["ray.task_name"] == "child"
    assert task["attributes"]["ray.job_id"] == parent["attributes"]["ray.job_id"]
    assert len(task["attributes"]["ray.task_id"]) == 48
    assert "ray.actor_id" in actor["attributes"] and "ray.actor_id" not in task["attributes"]

    # The embedded default wrote under the Ray session directory, one file per process.
    tdir = Path(info["session"]) / "raydbg" / "telemetry"
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
