"""Telemetry by default: a job run with RAY_DEBUG=1 and no set-up code writes one trace across
the driver and its tasks (embedded files, or OTLP when the driver names an endpoint), and a
worker of it that never emits never imports the SDK; set-up in the driver no longer fails
tasks; `raydbg status --json` gives each agent's /metrics URL.

One real cluster for the module; each job is a real subprocess driver connecting to it.
"""

from __future__ import annotations

import json
import os
import textwrap
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from cluster import ENV, Cluster
from telemetry_otlp import RAY_SPANS, TRACED_TASKS, HttpReceiver, check_ray_trace, run_ray_driver

from raydbg.private_dir import session_path

pytestmark = pytest.mark.e2e

# A user's job: no telemetry.setup(), no ray_init_kwargs(), no extra variable; raydbg is
# active only through RAY_DEBUG=1 (the .pth hook). Prints info, waits for the test.
DEFAULT_JOB = textwrap.dedent(
    """
    import json, os, sys
    import ray
    from raydbg import telemetry as tm
    ray.init(address=sys.argv[1], logging_level="ERROR")

    @ray.remote
    class Probe:
        def sdk(self):  # whose breakpoint(), and which OpenTelemetry SDK modules are loaded
            return [sys.breakpointhook.__module__,
                    sorted(m for m in sys.modules if m.startswith("opentelemetry.sdk"))]

        def emit(self):
            with tm.span("test.probe.emit"):
                return self.sdk()

    quiet, loud = Probe.remote(), Probe.remote()
    ray.get([quiet.sdk.remote(), loud.sdk.remote()])  # own processes, before any task ran
    """ + TRACED_TASKS + """
    plain = ray.get(child.remote(1))  # outside any span: no context travels
    with tm.span("test.driver.parent", attributes={"test.case": "ray"}):
        pid = ray.get(child.remote(7))
        actor = Worker.remote()
        ray.get(actor.work.remote())
    tm.histogram("test.driver.wait", "s").record(0.25, phase="get")
    lazy = {"quiet": ray.get(quiet.sdk.remote()), "loud": ray.get(loud.emit.remote())}
    info = {"pid": pid, "plain": plain, "driver": os.getpid(), "lazy": lazy,
            "job": ray.get_runtime_context().get_job_id(), "kind": tm.stats()["kind"],
            "session": ray._private.worker._global_node.get_session_dir_path()}
    print(json.dumps(info), flush=True)
    sys.stdin.readline()
    """
)

# The trigger of the old "every task fails": telemetry.setup() in an activated driver
# (before ray.init) turned Ray's tracing on there, and its workers could not take the
# context. Tasks inside and outside a span, with keyword arguments, and an actor (with a
# generator method, which Ray's own tracing breaks: it passes `_ray_trace_ctx` to it).
SETUP_FIRST_JOB = textwrap.dedent(
    """
    import json, os, sys
    import ray
    from raydbg import telemetry as tm
    assert tm.setup()
    ray.init(address=sys.argv[1], logging_level="ERROR")

    @ray.remote(max_retries=0)
    def add(a, b=1):
        return a + b

    @ray.remote
    class Acc:
        def plus(self, a, b=1):
            return a + b

        def count(self, n):  # Ray's tracing skips generator methods, yet sends them context
            for i in range(n):
                yield i

    before = ray.get(add.remote(10))
    with tm.span("test.regression.parent"):
        inside = ray.get([add.remote(i, b=2) for i in range(4)])
        acc = Acc.remote()
        actor = ray.get(acc.plus.remote(5, b=5))
        actor += sum(ray.get(list(acc.count.options(num_returns="streaming").remote(3))))
    after = ray.get(add.remote(20, b=0))
    from raydbg.telemetry import ray_tracing
    print(json.dumps({"out": [before, inside, actor, after], "kind": tm.stats()["kind"],
                      "path": tm.stats()["jsonl_path"], "propagates": ray_tracing.enabled()}),
          flush=True)
    sys.stdin.readline()
    """
)


@pytest.fixture(scope="module")
def cluster() -> Iterator[Cluster]:
    with Cluster(num_cpus=2, env=dict(ENV)) as c:
        yield c


def _job_env(**extra: str) -> dict[str, str]:
    env = {
        "RAY_DEBUG": "1",
        "OTEL_METRIC_EXPORT_INTERVAL": "500",  # carried to the workers with the rest
        **extra,
    }
    return env


@pytest.fixture
def clean_env(monkeypatch: pytest.MonkeyPatch) -> None:
    # The user's environment, not the test runner's: no telemetry variables at all.
    for key in list(os.environ):
        if key.startswith(("OTEL_", "RAYDBG_TELEMETRY", "RAYDBG_TRACE")):
            monkeypatch.delenv(key)
    monkeypatch.delenv("RAY_ADDRESS", raising=False)


def _check_lazy_set_up(info: dict[str, Any]) -> None:
    """An activated worker that never emits has not imported the SDK; one that emits has."""
    quiet, loud = info["lazy"]["quiet"], info["lazy"]["loud"]
    assert quiet[0] == loud[0] == "raydbg.worker.hook"  # both activated (raydbg's breakpoint)
    assert quiet[1] == [], quiet
    assert "opentelemetry.sdk.trace" in loud[1], loud  # the probe sees an import


def _records(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def _job_files(tdir: Path, job: str) -> dict[Path, list[dict[str, Any]]]:
    """JSON-lines files under `tdir` whose resource or spans belong to Ray job `job`."""
    out = {}
    for p in sorted(tdir.glob("*.jsonl")):
        recs = _records(p)
        if any(r.get("attributes", {}).get("ray.job_id") == job for r in recs):
            out[p] = recs
    return out


def test_default_files_hold_one_trace_across_driver_and_tasks(
    cluster: Cluster, clean_env: None
) -> None:
    tdir = session_path(cluster_session(cluster), "telemetry")

    def worker_wrote(info: dict[str, Any]) -> bool:
        files = _job_files(tdir, info["job"]) if tdir.exists() else {}
        names = {r.get("name") for recs in files.values() for r in recs}
        return {"test.task.child", "test.actor.child", "test.task.calls"} <= names

    info = run_ray_driver(_job_env(), worker_wrote, DEFAULT_JOB, (cluster.address,))
    assert info["kind"] == "driver"
    _check_lazy_set_up(info)
    files = _job_files(tdir, info["job"])
    driver_file = tdir / f"driver-{info['driver']}.jsonl"
    worker_file = tdir / f"worker-{info['pid']}.jsonl"
    assert driver_file in files and worker_file in files, sorted(p.name for p in files)
    # One file per process, each opened by its resource record naming the process kind.
    assert files[driver_file][0]["type"] == "resource"
    assert files[driver_file][0]["attributes"]["raydbg.process"] == "driver"
    assert files[worker_file][0]["attributes"]["raydbg.process"] == "worker"
    spans = [r for recs in files.values() for r in recs if r["type"] == "span"]
    driver_names = {r.get("name") for r in files[driver_file]}
    assert "test.driver.parent" in driver_names and "test.task.child" not in driver_names
    # The call made outside any span carried no context: its task span is a root.
    plain = [s for s in spans if s["name"] == "test.task.child" and s["attributes"]["x"] == 1]
    assert len(plain) == 1 and plain[0]["parent_id"] is None
    check_ray_trace([s for s in spans if s not in plain], info)
    # Metrics from both kinds of process: the workers' counter, the driver's histogram.
    # Records are cumulative: each file's last record of a metric is that process's total.
    latest = {
        (p, r["name"]): r for p, recs in files.items() for r in recs if r["type"] == "metric"
    }
    calls = [pt for (_, n), r in latest.items() if n == "test.task.calls" for pt in r["points"]]
    assert sorted((pt["attributes"]["test.arg"], pt["value"]) for pt in calls) == [(1, 1), (7, 1)]
    assert latest[(driver_file, "test.driver.wait")]["points"][0]["count"] == 1


def cluster_session(cluster: Cluster) -> str:
    import ray

    return str(ray._private.worker._global_node.get_session_dir_path())


def test_otlp_endpoint_in_the_driver_reaches_driver_and_workers(
    cluster: Cluster, clean_env: None
) -> None:
    receiver = HttpReceiver()
    try:
        env = _job_env(OTEL_EXPORTER_OTLP_ENDPOINT=f"http://127.0.0.1:{receiver.port}")

        def arrived(_info: dict[str, Any]) -> bool:
            return RAY_SPANS <= receiver.span_names() and {
                "test.task.calls",
                "test.driver.wait",
                "raydbg.telemetry.spans.dropped",
            } <= receiver.metric_names()

        info = run_ray_driver(env, arrived, DEFAULT_JOB, (cluster.address,))
        assert arrived(info), (receiver.span_names(), receiver.metric_names())
        with receiver.lock:
            spans = list(receiver.spans)
            points = list(receiver.points)
    finally:
        receiver.close()
    check_ray_trace(spans, info)  # with OTLP, each span's resource names its process too
    _check_lazy_set_up(info)
    by_metric: dict[str, list[dict[str, Any]]] = {}
    for name, _kind, point in points:
        by_metric.setdefault(name, []).append(point)
    calls = by_metric["test.task.calls"]
    assert {p["resource"]["raydbg.process"] for p in calls} == {"worker"}
    assert {p["attributes"]["test.arg"] for p in calls} == {1, 7}
    waits = by_metric["test.driver.wait"]
    assert waits[-1]["count"] == 1 and waits[-1]["resource"]["process.pid"] == info["driver"]
    # raydbg's own metric, from the driver (and every worker that set up).
    kinds = {p["resource"]["raydbg.process"] for p in by_metric["raydbg.telemetry.spans.dropped"]}
    assert "driver" in kinds


def test_setup_in_an_activated_driver_leaves_every_task_working(
    cluster: Cluster, clean_env: None
) -> None:
    seen: dict[str, Any] = {}

    def done(info: dict[str, Any]) -> bool:
        seen.update(info)
        return True

    run_ray_driver(_job_env(), done, SETUP_FIRST_JOB, (cluster.address,))
    assert seen["out"] == [11, [2, 3, 4, 5], 13, 20]
    assert seen["propagates"] is True
    # Set up before ray.init, the driver still calls itself a driver (not "process").
    assert seen["kind"] == "driver" and Path(seen["path"]).name.startswith("driver-")


def test_status_lists_each_agents_metrics_url_scraped_with_the_token(
    cluster: Cluster,
) -> None:
    gw = cluster.up()
    out = cluster.cli("status", "--json")
    assert out.returncode == 0, out.stderr
    agents = json.loads(out.stdout)["agents"]
    assert agents and all(a["metrics_url"].endswith("/metrics") for a in agents)
    for agent in agents:
        url = agent["metrics_url"]
        assert url == f"http://{agent['node_ip']}:{agent['port']}/metrics"
        with pytest.raises(urllib.error.HTTPError) as refused:
            urllib.request.urlopen(url, timeout=10)
        assert refused.value.code == 401
        text = _scrape(url, gw.token)
        assert "raydbg_telemetry_spans_dropped_total{" in text, text[:2000]
        assert 'raydbg_process="agent"' in text


def _scrape(url: str, token: str) -> str:
    req = urllib.request.Request(url, headers={"Authorization": f"Bearer {token}"})
    with urllib.request.urlopen(req, timeout=10) as resp:
        assert resp.status == 200
        assert resp.headers["Content-Type"].startswith("text/plain")
        return str(resp.read().decode())
