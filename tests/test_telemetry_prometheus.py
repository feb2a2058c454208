"""A real Prometheus server scrapes an aiohttp `/metrics` built on `metrics_handler`, found
through the file_sd file `write_file_sd` wrote; queries return the agent's and a worker's values."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import textwrap
import time
import urllib.parse
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from doubles import free_port

from raydbg.telemetry.prometheus import file_sd_groups, scrape_config, write_file_sd

HERE = Path(__file__).parent

AGENT = textwrap.dedent(
    """
    import asyncio, sys
    from aiohttp import web
    from raydbg import telemetry as tm
    from raydbg.telemetry.prometheus import metrics_handler
    tm.setup("agent")
    tm.counter("raydbg.memory.kills", "{kill}", "Workers killed").add(3, reason="node_memory")
    tm.gauge("raydbg.memory.node.used", "By", "Node memory used").set(2.5e9)

    async def main():
        app = web.Application()
        app.router.add_get("/metrics", metrics_handler)
        runner = web.AppRunner(app)
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", 0)
        await site.start()
        print(runner.addresses[0][1], flush=True)
        await asyncio.get_running_loop().run_in_executor(None, sys.stdin.readline)
        await runner.cleanup()

    asyncio.run(main())
    """
)

WORKER = textwrap.dedent(
    """
    import sys
    from raydbg import telemetry as tm
    tm.setup("worker")
    tm.counter("raydbg.memory.kills", "{kill}", "Workers killed").add(5, reason="worker_rss")
    tm.flush()
    print("ready", flush=True)
    sys.stdin.readline()
    """
)


def _prometheus_binary() -> str:
    found = shutil.which("prometheus")
    if found:
        return found
    script = HERE / "telemetry_install_prometheus.sh"
    res = subprocess.run(["bash", str(script)], capture_output=True, text=True, timeout=300)
    found = shutil.which("prometheus")
    if not found:
        pytest.skip(f"Debian's prometheus package could not be installed: {res.stderr.strip()}")
    return found


def _start(code: str, env: dict[str, str]) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-c", code],
        env={**os.environ, **env},
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )


@pytest.fixture
def agent_and_worker(tmp_path: Path) -> Iterator[int]:
    env = {
        "RAYDBG_TELEMETRY_DIR": str(tmp_path / "telemetry"),
        "OTEL_METRIC_EXPORT_INTERVAL": "500",
    }
    worker = _start(WORKER, env)
    procs = [worker]
    try:
        assert worker.stdout is not None and worker.stdout.readline().strip() == "ready"
        agent = _start(AGENT, env)
        procs.append(agent)
        assert agent.stdout is not None
        yield int(agent.stdout.readline())
    finally:
        for p in procs:
            if p.poll() is None and p.stdin is not None:
                p.stdin.write("\n")
                p.stdin.flush()
            try:
                p.wait(10)
            except subprocess.TimeoutExpired:
                p.kill()


def _query(port: int, promql: str) -> list[dict[str, Any]]:
    url = f"http://127.0.0.1:{port}/api/v1/query?" + urllib.parse.urlencode({"query": promql})
    with urllib.request.urlopen(url, timeout=5) as resp:
        body = json.load(resp)
    assert body["status"] == "success"
    return list(body["data"]["result"])


def test_prometheus_scrapes_metrics_handler(agent_and_worker: int, tmp_path: Path) -> None:
    binary = _prometheus_binary()
    sd_file = write_file_sd(
        str(tmp_path / "targets.json"),
        [{"node_ip": "127.0.0.1", "port": agent_and_worker, "node_id": "n1", "is_head": True}],
        labels={"cluster": "test"},
    )
    config = yaml.safe_load(scrape_config(file_sd_path=sd_file, scrape_interval="1s"))
    config["global"] = {"scrape_interval": "1s", "evaluation_interval": "1s"}
    (tmp_path / "prometheus.yml").write_text(yaml.safe_dump(config))
    port = free_port()
    server = subprocess.Popen(
        [
            binary,
            f"--config.file={tmp_path / 'prometheus.yml'}",
            f"--storage.tsdb.path={tmp_path / 'tsdb'}",
            f"--web.listen-address=127.0.0.1:{port}",
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        result: list[dict[str, Any]] = []
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and len(result) < 2:
            time.sleep(0.5)
            try:
                result = _query(port, "raydbg_memory_kills_total")
            except OSError:
                continue  # not listening yet
        values = {r["metric"]["raydbg_process"]: float(r["value"][1]) for r in result}
        # The agent's own counter and, via its snapshot file, a worker's on the same node.
        assert values == {"agent": 3.0, "worker": 5.0}, result
        labels = result[0]["metric"]
        assert labels["node_id"] == "n1" and labels["cluster"] == "test"
        used = _query(port, "raydbg_memory_node_used_bytes")
        assert float(used[0]["value"][1]) == 2.5e9
    finally:
        server.terminate()
        server.wait(10)


def test_scrape_config_and_file_sd_shapes(tmp_path: Path) -> None:
    groups = file_sd_groups(["http://10.0.0.2:8265/", {"node_ip": "h", "port": 1, "node_id": "x"}])
    assert groups == [
        {"targets": ["10.0.0.2:8265"], "labels": {}},
        {"targets": ["h:1"], "labels": {"node_id": "x"}},
    ]
    static = yaml.safe_load(scrape_config(endpoints=["a:1"], bearer_token_file="/t"))
    job = static["scrape_configs"][0]
    assert job["static_configs"] == [{"targets": ["a:1"], "labels": {}}]
    assert job["authorization"] == {"type": "Bearer", "credentials_file": "/t"}
    assert job["metrics_path"] == "/metrics"
