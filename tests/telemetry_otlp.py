"""Shared by the OTLP tests: loopback receivers (HTTP and gRPC) that decode real OTLP protobuf,
and the Ray driver whose spans must form one trace across a task and an actor call."""

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
from collections.abc import Callable
from concurrent import futures
from typing import Any

from opentelemetry.proto.collector.metrics.v1 import metrics_service_pb2, metrics_service_pb2_grpc
from opentelemetry.proto.collector.trace.v1 import trace_service_pb2, trace_service_pb2_grpc
from opentelemetry.proto.common.v1.common_pb2 import AnyValue


def _value(v: AnyValue) -> Any:
    return getattr(v, v.WhichOneof("value")) if v.WhichOneof("value") else None


def _attrs(kvs: Any) -> dict[str, Any]:
    return {kv.key: _value(kv.value) for kv in kvs}


class Collected:
    """Decoded spans and metric points from OTLP export requests (thread-safe)."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.spans: list[dict[str, Any]] = []
        # (name, kind, point dict with attributes and value or count/sum)
        self.points: list[tuple[str, str, dict[str, Any]]] = []
        self.requests = 0

    def add_traces(self, msg: trace_service_pb2.ExportTraceServiceRequest) -> None:
        with self.lock:
            self.requests += 1
            for rs in msg.resource_spans:
                resource = _attrs(rs.resource.attributes)
                for ss in rs.scope_spans:
                    for s in ss.spans:
                        self.spans.append(
                            {
                                "name": s.name,
                                "trace_id": s.trace_id.hex(),
                                "span_id": s.span_id.hex(),
                                "parent_id": s.parent_span_id.hex() or None,
                                "kind": s.kind,
                                "attributes": _attrs(s.attributes),
                                "resource": resource,
                            }
                        )

    def add_metrics(self, msg: metrics_service_pb2.ExportMetricsServiceRequest) -> None:
        with self.lock:
            self.requests += 1
            for rm in msg.resource_metrics:
                resource = _attrs(rm.resource.attributes)
                for sm in rm.scope_metrics:
                    for m in sm.metrics:
                        kind = m.WhichOneof("data") or ""
                        for p in getattr(m, kind).data_points:
                            point: dict[str, Any] = {
                                "attributes": _attrs(p.attributes),
                                "resource": resource,
                            }
                            if kind == "histogram":
                                point.update(count=p.count, sum=p.sum)
                            else:
                                point["value"] = p.as_int if p.HasField("as_int") else p.as_double
                            self.points.append((m.name, kind, point))

    def span_names(self) -> set[str]:
        with self.lock:
            return {s["name"] for s in self.spans}

    def metric_names(self) -> set[str]:
        with self.lock:
            return {name for name, _, _ in self.points}

    def last_point(self, name: str) -> tuple[str, dict[str, Any]]:
        """Kind and latest point of metric `name` (cumulative: the latest is the total)."""
        with self.lock:
            found = [(kind, p) for n, kind, p in self.points if n == name]
        assert found, f"no metric {name!r}"
        return found[-1]


def wait_until(cond: Callable[[], bool], timeout_s: float = 30.0) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if cond():
            return True
        time.sleep(0.2)
    return cond()


class HttpReceiver(Collected):
    """An OTLP/HTTP receiver on 127.0.0.1 (aiohttp in a thread): `http://127.0.0.1:{port}`."""

    def __init__(self) -> None:
        super().__init__()
        self.loop = asyncio.new_event_loop()
        self.port = 0
        ready = threading.Event()
        self.thread = threading.Thread(target=self._serve, args=(ready,), daemon=True)
        self.thread.start()
        assert ready.wait(10)

    def _serve(self, ready: threading.Event) -> None:
        from aiohttp import web

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
    async def _body(request: Any) -> bytes:
        body = await request.read()
        assert request.content_type == "application/x-protobuf"
        return gzip.decompress(body) if request.headers.get("Content-Encoding") == "gzip" else body

    async def _traces(self, request: Any) -> Any:
        return await self._export(request, trace_service_pb2, "Trace", self.add_traces)

    async def _metrics(self, request: Any) -> Any:
        return await self._export(request, metrics_service_pb2, "Metrics", self.add_metrics)

    async def _export(self, request: Any, pb2: Any, signal: str, add: Any) -> Any:
        """Decode an Export<signal>ServiceRequest, keep it, answer with an empty response."""
        from aiohttp import web

        msg = getattr(pb2, f"Export{signal}ServiceRequest")()
        msg.ParseFromString(await self._body(request))
        add(msg)
        body = getattr(pb2, f"Export{signal}ServiceResponse")().SerializeToString()
        return web.Response(body=body, content_type="application/x-protobuf")

    def close(self) -> None:
        asyncio.run_coroutine_threadsafe(self.runner.cleanup(), self.loop).result(10)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(10)


class GrpcReceiver(Collected):
    """An OTLP/gRPC receiver on 127.0.0.1 (grpcio server with OTel's generated servicers)."""

    def __init__(self) -> None:
        import grpc

        super().__init__()
        collected = self

        class Traces(trace_service_pb2_grpc.TraceServiceServicer):
            def Export(self, request: Any, context: Any) -> Any:  # noqa: N802 - gRPC's name
                collected.add_traces(request)
                return trace_service_pb2.ExportTraceServiceResponse()

        class Metrics(metrics_service_pb2_grpc.MetricsServiceServicer):
            def Export(self, request: Any, context: Any) -> Any:  # noqa: N802
                collected.add_metrics(request)
                return metrics_service_pb2.ExportMetricsServiceResponse()

        self.server = grpc.server(futures.ThreadPoolExecutor(max_workers=4))
        trace_service_pb2_grpc.add_TraceServiceServicer_to_server(Traces(), self.server)
        metrics_service_pb2_grpc.add_MetricsServiceServicer_to_server(Metrics(), self.server)
        self.port = self.server.add_insecure_port("127.0.0.1:0")
        self.server.start()

    def close(self) -> None:
        self.server.stop(grace=None)


# A task and an actor method that open spans (the drivers below call them in a span).
TRACED_TASKS = """
    @ray.remote(max_retries=0)
    def child(x):
        with tm.span("test.task.child", x=x):
            tm.counter("test.task.calls", "{call}").add(1, attributes={"test.arg": x})
            return os.getpid()

    @ray.remote
    class Worker:
        def work(self):
            with tm.span("test.actor.child"):
                return os.getpid()
"""

# A driver that makes one trace across a Ray task and an actor method call; it prints
# {"pid", "session"} and waits for a line on stdin before shutting down.
RAY_DRIVER = textwrap.dedent(
    """
    import json, os, sys
    import ray
    from raydbg import telemetry as tm
    tm.setup("driver")
    ray.init(address="local", num_cpus=1, include_dashboard=False,
             runtime_env={"env_vars": tm.runtime_env_vars()}, **tm.ray_init_kwargs())
    """ + TRACED_TASKS + """
    with tm.span("test.driver.parent", attributes={"test.case": "ray"}):
        pid = ray.get(child.remote(7))
        actor = Worker.remote()
        ray.get(actor.work.remote())
    tm.histogram("test.driver.wait", "s").record(0.25, phase="get")
    session = ray._private.worker._global_node.get_session_dir_path()
    print(json.dumps({"pid": pid, "session": session}), flush=True)
    sys.stdin.readline()  # the test says when it has seen every span
    ray.shutdown()
    with tm.span("test.driver.after_shutdown"):  # still goes to the session's files
        pass
    """
)
RAY_SPANS = {"test.driver.parent", "test.task.child", "test.actor.child"}


def run_ray_driver(
    env: dict[str, str],
    seen: Callable[[dict[str, Any]], bool],
    code: str = RAY_DRIVER,
    args: tuple[str, ...] = (),
) -> dict[str, Any]:
    """Run `code` (RAY_DRIVER) with `env` added; once it has printed `info`, wait (<= 30 s)
    until `seen(info)`, then let it finish. Returns `info`."""
    env = {**os.environ, "OTEL_BSP_SCHEDULE_DELAY": "200", **env}
    proc = subprocess.Popen(
        [sys.executable, "-c", code, *args],
        env=env,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        line = proc.stdout.readline() if proc.stdout else ""
        assert line, proc.stderr.read() if proc.stderr else ""
        info: dict[str, Any] = json.loads(line)
        wait_until(lambda: seen(info))
        assert proc.stdin is not None
        proc.stdin.write("done\n")
        proc.stdin.flush()
        assert proc.wait(60) == 0, proc.stderr.read() if proc.stderr else ""
    finally:
        if proc.poll() is None:
            proc.kill()
    return info


def _ancestors(span: dict[str, Any], by_id: dict[str, dict[str, Any]]) -> list[str]:
    names = []
    while span["parent_id"] in by_id:
        span = by_id[span["parent_id"]]
        names.append(span["name"])
    return names


def check_ray_trace(spans: list[dict[str, Any]], info: dict[str, Any]) -> None:
    """The driver's span is the ancestor of the task's and the actor's, through Ray's
    producer/consumer spans, in one trace; attributes name the job, task and actor."""
    by_name = {s["name"]: s for s in spans}
    assert RAY_SPANS <= set(by_name), sorted(by_name)
    parent, task, actor = (
        by_name[n] for n in ("test.driver.parent", "test.task.child", "test.actor.child")
    )
    by_id = {s["span_id"]: s for s in spans}
    assert task["trace_id"] == parent["trace_id"] == actor["trace_id"]
    task_chain = _ancestors(task, by_id)
    assert task_chain[-1] == "test.driver.parent", task_chain
    assert task_chain[0].endswith("child ray.remote_worker") and task_chain[1].endswith(
        "ray.remote"
    )
    assert _ancestors(actor, by_id)[-1] == "test.driver.parent"
    assert parent["attributes"]["test.case"] == "ray"
    assert task["attributes"]["x"] == 7 and task["attributes"]["ray.task_name"] == "child"
    assert task["attributes"]["ray.job_id"] == parent["attributes"]["ray.job_id"]
    assert len(task["attributes"]["ray.task_id"]) == 48
    assert "ray.actor_id" in actor["attributes"] and "ray.actor_id" not in task["attributes"]
    if "resource" in task:  # OTLP carries the resource per span (JSON lines: per file)
        assert parent["resource"]["raydbg.process"] == "driver"
        assert task["resource"]["raydbg.process"] == "worker"
        assert task["resource"]["process.pid"] == info["pid"]
