"""raydbg's Prometheus rendering (`promconvert`) gives, for the same metrics, exactly the text
OpenTelemetry's Prometheus exporter gives; `prometheus_text` serves each live process's
snapshot series once and skips dead processes."""

from __future__ import annotations

import json
import subprocess
from collections.abc import Callable, Iterable
from pathlib import Path

from opentelemetry.exporter.prometheus import PrometheusMetricReader
from opentelemetry.metrics import CallbackOptions, Observation
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.resources import Resource
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.metrics_core import Metric as PromMetric
from prometheus_client.parser import text_string_to_metric_families

from raydbg.telemetry import promconvert
from raydbg.telemetry.prometheus import prometheus_text
from raydbg.telemetry.provider import LABEL_RESOURCE_KEYS

RESOURCE = {
    "service.name": "raydbg",
    "raydbg.process": "agent",
    "process.pid": 4242,
    "host.name": "h1",
    "ray.job_id": "01000000",
}


class _Fixed:
    def __init__(self, families: list[PromMetric]) -> None:
        self.families = families

    def collect(self) -> Iterable[PromMetric]:
        return self.families


def _observe(
    value: float, attrs: dict[str, str | float]
) -> Callable[[CallbackOptions], list[Observation]]:
    def callback(_options: CallbackOptions) -> list[Observation]:
        return [Observation(value, attrs)]

    return callback


def test_same_text_as_opentelemetrys_prometheus_exporter() -> None:
    registry = CollectorRegistry(auto_describe=True)
    theirs = PrometheusMetricReader(
        registry=registry,
        scope_info_enabled=False,
        resource_attribute_filter=LABEL_RESOURCE_KEYS.__contains__,
    )
    ours = InMemoryMetricReader()
    mp = MeterProvider(metric_readers=[theirs, ours], resource=Resource.create(RESOURCE))
    meter = mp.get_meter("raydbg")
    kills = meter.create_counter("raydbg.memory.kills", "{kill}", "Workers killed")
    kills.add(3, {"reason": "node_memory", "dry_run": False})
    kills.add(2, {"reason": "rss", "dry_run": True, "node-id": "n1"})  # another label set
    meter.create_up_down_counter("raydbg.relay.active", "{connection}").add(2)
    step = meter.create_histogram("sd.train.step.duration", "s", "Step time")
    for v in (0.002, 0.2, 7.0):
        step.record(v, {"rank": 0})
    meter.create_histogram("sd.train.images_per_second", "{image}/s").record(12.5)
    meter.create_gauge("raydbg.memory.node.used", "By", "Node memory used").set(2.5e9)
    meter.create_observable_gauge("x.ratio", [_observe(0.5, {"k": 1.5})], unit="1")
    meter.create_observable_counter("x.speed", [_observe(3, {})], unit="m/s")
    meter.create_observable_up_down_counter("x.mem", [_observe(7, {})], unit="MiBy")
    meter.create_counter("x.odd-name/v2", "%").add(1, {"3d.key": "v", "tags": ("a", "b")})
    meter.create_counter("x.wait", "ms").add(4)
    meter.create_counter("x.odd_unit", "foo bar/").add(1)

    expected = generate_latest(registry).decode()
    data = ours.get_metrics_data()
    assert data is not None
    info = promconvert.target_info(data.resource_metrics[0].resource)
    got = generate_latest(_Fixed([info, *promconvert.families([data], LABEL_RESOURCE_KEYS)]))
    assert got.decode() == expected
    for seen in ("x_speed_meters_per_second_total{", "# TYPE x_mem_mebibytes gauge", "_d_key="):
        assert seen in expected  # the cases ran
    assert 'raydbg_memory_kills_total{dry_run="true",node_id="n1",process_pid="4242"' in expected
    mp.shutdown()


def _snapshot(pid: int, kills: float) -> dict[str, object]:
    return {
        "resource": {"raydbg.process": "worker", "process.pid": pid, "host.name": "h1"},
        "metrics": [
            {"name": "raydbg.memory.kills", "kind": "counter", "unit": "{kill}",
             "description": "Workers killed",
             "points": [{"attributes": {"reason": "rss"}, "value": kills}]},
            {"name": "raydbg.relay.active", "kind": "updowncounter", "unit": "{connection}",
             "points": [{"attributes": {}, "value": 1}]},
            {"name": "sd.train.step.duration", "kind": "histogram", "unit": "s",
             "points": [{"attributes": {}, "count": 2, "sum": 0.3, "min": 0.1, "max": 0.2,
                         "bounds": [0.15], "counts": [1, 1]}]},
        ],
    }  # fmt: skip


def test_node_text_has_each_live_process_once(tmp_path: Path) -> None:
    done = subprocess.Popen(["true"])
    done.wait()
    # A live process of the test's own (not its parent: an orphaned run's parent is pid 1).
    live = subprocess.Popen(["sleep", "60"])
    pids = {live.pid: 3.0, 1: 5.0, done.pid: 9.0}  # the last one has exited
    for pid, kills in pids.items():
        (tmp_path / f"worker-{pid}.metrics.json").write_text(json.dumps(_snapshot(pid, kills)))
    try:
        text = prometheus_text(directory=str(tmp_path)).decode()
    finally:
        live.kill()
        live.wait()
    fams = {f.name: f for f in text_string_to_metric_families(text)}
    kills = sorted(
        (s.labels["process_pid"], s.value)
        for s in fams["raydbg_memory_kills"].samples
        if s.name == "raydbg_memory_kills_total"
    )
    assert kills == sorted([(str(live.pid), 3.0), ("1", 5.0)]), text
    assert fams["raydbg_relay_active"].type == "gauge"  # an up-down counter
    assert len(fams["raydbg_relay_active"].samples) == 2
    buckets = [s for s in fams["sd_train_step_duration_seconds"].samples
               if s.name.endswith("_bucket")]  # fmt: skip
    assert sorted((s.labels["le"], s.value) for s in buckets) == sorted(
        [("0.15", 1.0), ("+Inf", 2.0)] * 2
    )
    assert text.count("# TYPE raydbg_memory_kills_total counter") == 1
