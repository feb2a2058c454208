"""Prometheus exposition of raydbg metrics for the node agent, plus scrape-config helpers.

`prometheus_text()` renders, with prometheus_client and OTel's Prometheus naming rules
(`promconvert`), this process's metrics and the latest snapshot of every other live process
on the node that writes the embedded files (`<kind>-<pid>.metrics.json`). Series carry
`raydbg_process` and `process_pid` labels so processes never collide.
`metrics_handler` is an aiohttp handler for `/metrics`; `write_file_sd` and
`scrape_config` tell a Prometheus server where the agents are.
"""

from __future__ import annotations

import glob
import json
import os
from collections.abc import Iterable, Iterator, Mapping, Sequence
from typing import Any

from opentelemetry.sdk.metrics.export import (
    AggregationTemporality,
    Gauge,
    Histogram,
    HistogramDataPoint,
    Metric,
    MetricsData,
    NumberDataPoint,
    ResourceMetrics,
    ScopeMetrics,
    Sum,
)
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.util.instrumentation import InstrumentationScope
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest
from prometheus_client.metrics_core import Metric as PromMetric

from raydbg.private_dir import open_own_file, open_private
from raydbg.proc_identity import pid_alive
from raydbg.telemetry import output_dir
from raydbg.telemetry.jsonl import SNAPSHOT_SUFFIX
from raydbg.telemetry.promconvert import families, target_info
from raydbg.telemetry.provider import LABEL_RESOURCE_KEYS, SCOPE, state

CONTENT_TYPE = CONTENT_TYPE_LATEST


def _point_data(rec: Mapping[str, Any]) -> Sum | Gauge | Histogram:
    cum = AggregationTemporality.CUMULATIVE
    if rec["kind"] == "histogram":
        return Histogram(
            [
                HistogramDataPoint(
                    p["attributes"],
                    0,
                    0,
                    p["count"],
                    p["sum"],
                    p["counts"],
                    p["bounds"],
                    p["min"],
                    p["max"],
                )
                for p in rec["points"]
            ],
            cum,
        )
    points = [NumberDataPoint(p["attributes"], 0, 0, p["value"]) for p in rec["points"]]
    if rec["kind"] == "gauge":
        return Gauge(points)
    return Sum(points, cum, is_monotonic=rec["kind"] == "counter")


def snapshot_to_metrics_data(snapshot: Mapping[str, Any]) -> MetricsData:
    """Rebuild OpenTelemetry MetricsData from one `.metrics.json` snapshot."""
    metrics = [
        Metric(r["name"], r.get("description", ""), r.get("unit", ""), _point_data(r))
        for r in snapshot.get("metrics", [])
    ]
    resource = Resource(dict(snapshot.get("resource", {})))
    scope = ScopeMetrics(InstrumentationScope(SCOPE), metrics, "")
    return MetricsData([ResourceMetrics(resource, [scope], "")])


def _node_data(directory: str, skip_pid: int | None) -> Iterator[MetricsData]:
    """The latest snapshot of each live process on the node, except `skip_pid`'s."""
    for path in glob.glob(os.path.join(directory, f"*{SNAPSHOT_SUFFIX}")):
        try:
            with open(open_own_file(path), encoding="utf-8") as fh:  # never a planted FIFO or link
                snap = json.load(fh)
            pid = int(snap.get("resource", {}).get("process.pid", 0))
        except (OSError, ValueError):
            continue
        if pid == skip_pid or not pid_alive(pid):
            continue  # served live; or dead, and a dead process's gauges would lie
        yield snapshot_to_metrics_data(snap)


class _Families:
    """Ready-made families, in the shape `generate_latest` reads."""

    def __init__(self, families: list[PromMetric]) -> None:
        self.families = families

    def collect(self) -> Iterable[PromMetric]:
        return self.families


def prometheus_text(node: bool = True, directory: str | None = None) -> bytes:
    """Prometheus text of this process's raydbg metrics, and (node=True) of the node's
    other live processes that write the embedded snapshot files."""
    datas: list[MetricsData] = []
    info: list[PromMetric] = []
    reader = state.metric_reader if state.meter_provider is not None else None
    live = reader.get_metrics_data() if reader is not None else None
    if live is not None:
        datas.append(live)
        # target_info names this process's whole resource (snapshots have their labels).
        info = [target_info(rm.resource) for rm in live.resource_metrics[:1]]
    if node:
        plan_dir = state.plan.jsonl_dir if state.plan else os.environ.get("RAYDBG_TELEMETRY_DIR")
        found = directory or output_dir.telemetry_dir(plan_dir)
        datas.extend(_node_data(found, os.getpid() if reader is not None else None))
    return generate_latest(_Families(info + families(datas, LABEL_RESOURCE_KEYS)))


async def metrics_handler(request: Any) -> Any:
    """aiohttp handler: `app.router.add_get("/metrics", metrics_handler)`."""
    import asyncio

    from aiohttp import web

    # Reading snapshot files is blocking I/O: keep it off the event loop.
    body = await asyncio.to_thread(prometheus_text)
    return web.Response(body=body, headers={"Content-Type": CONTENT_TYPE})


def _target(endpoint: str | Mapping[str, Any]) -> tuple[str, dict[str, str]]:
    if isinstance(endpoint, str):
        return endpoint.removeprefix("http://").removeprefix("https://").rstrip("/"), {}
    host = endpoint.get("node_ip") or endpoint.get("host") or "127.0.0.1"
    labels = {k: str(endpoint[k]) for k in ("node_id", "is_head") if k in endpoint}
    return f"{host}:{endpoint['port']}", labels


def metrics_url(agent: Mapping[str, Any]) -> str:
    """The Prometheus endpoint of an agent record (`node_ip`, `port`); it needs the bearer
    token raydbg's clients use (docs/telemetry.md, "Prometheus")."""
    target, _ = _target(agent)
    host, _, port = target.rpartition(":")
    return f"http://[{host}]:{port}/metrics" if ":" in host else f"http://{target}/metrics"


def file_sd_groups(
    endpoints: Sequence[str | Mapping[str, Any]], labels: Mapping[str, str] | None = None
) -> list[dict[str, Any]]:
    """Prometheus file_sd target groups: one per agent (`"host:port"` or an agent record)."""
    groups = []
    for ep in endpoints:
        target, own = _target(ep)
        groups.append({"targets": [target], "labels": {**(labels or {}), **own}})
    return groups


def write_file_sd(
    path: str,
    endpoints: Sequence[str | Mapping[str, Any]],
    labels: Mapping[str, str] | None = None,
) -> str:
    """Write (atomically) a file_sd target file that Prometheus re-reads when it changes."""
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    tmp = f"{path}.tmp"
    fd = open_private(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)  # a planted link: refused
    with os.fdopen(fd, "w", encoding="utf-8") as fh:
        json.dump(file_sd_groups(endpoints, labels), fh, indent=2)
    os.replace(tmp, path)
    return path


def scrape_config(
    job_name: str = "raydbg",
    *,
    file_sd_path: str | None = None,
    endpoints: Sequence[str | Mapping[str, Any]] | None = None,
    metrics_path: str = "/metrics",
    scrape_interval: str = "15s",
    bearer_token_file: str | None = None,
) -> str:
    """A `scrape_configs:` YAML snippet for the agents (file_sd or static targets)."""
    import yaml

    job: dict[str, Any] = {
        "job_name": job_name,
        "metrics_path": metrics_path,
        "scrape_interval": scrape_interval,
    }
    if bearer_token_file:
        job["authorization"] = {"type": "Bearer", "credentials_file": bearer_token_file}
    if file_sd_path:
        job["file_sd_configs"] = [{"files": [os.path.abspath(file_sd_path)]}]
    else:
        job["static_configs"] = file_sd_groups(endpoints or [])
    return str(yaml.safe_dump({"scrape_configs": [job]}, sort_keys=False))
