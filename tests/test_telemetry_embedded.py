"""The embedded default: JSON-lines files appear per process, parse, rotate, and never block."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import textwrap
import time
from pathlib import Path
from typing import Any

import pytest

EMIT = textwrap.dedent(
    """
    import sys
    from raydbg import telemetry as tm
    assert tm.setup("worker")
    kills = tm.counter("raydbg.memory.kills", "{kill}", "Workers killed")
    step = tm.histogram("sd.train.step.duration", "s", "Step time")

    @tm.span("decorated", attributes={"ray.train.world_rank": 3})
    def work(x):
        return x * 2

    with tm.span("outer", job="j1") as s:
        s.set_attribute("extra", 5)
        with tm.span("inner", n=1, skip=None):
            work(2)
    try:
        with tm.span("boom"):
            raise ValueError("bad")
    except ValueError:
        pass
    kills.add(2, reason="rss")
    with step.time():
        pass
    tm.gauge("raydbg.memory.node.used", "By").set(123)
    for i in range(int(sys.argv[1])):
        with tm.span("bulk", i=i):
            pass
    print(tm.stats()["jsonl_path"])
    """
)


def _run(code: str, env: dict[str, str], *args: str, timeout: float = 60) -> tuple[str, float]:
    t0 = time.monotonic()
    out = subprocess.run(
        [sys.executable, "-c", code, *args],
        env={**os.environ, **env},
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    assert out.returncode == 0, out.stderr
    return out.stdout.strip(), time.monotonic() - t0


def _records(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def test_files_appear_and_parse(tmp_path: Path) -> None:
    env = {"RAYDBG_TELEMETRY_DIR": str(tmp_path), "OTEL_SERVICE_NAME": "svc"}
    path_s, _ = _run(EMIT, env, "10")
    path = Path(path_s)
    assert path.parent == tmp_path and path.name.startswith("worker-")
    recs = _records(path)
    assert recs[0]["type"] == "resource"
    assert recs[0]["attributes"]["service.name"] == "svc"
    assert recs[0]["attributes"]["raydbg.process"] == "worker"
    spans = {r["name"]: r for r in recs if r["type"] == "span"}
    outer, inner, deco = spans["outer"], spans["inner"], spans["decorated"]
    assert inner["parent_id"] == outer["span_id"] and deco["parent_id"] == inner["span_id"]
    assert outer["parent_id"] is None and outer["trace_id"] == deco["trace_id"]
    assert outer["attributes"] == {"job": "j1", "extra": 5}
    assert inner["attributes"] == {"n": 1}
    assert deco["attributes"]["ray.train.world_rank"] == 3
    assert spans["boom"]["status"] == "error"
    assert spans["boom"]["events"][0]["name"] == "exception"
    assert 0 <= outer["duration"] < 5 and outer["end"] >= inner["end"]
    assert sum(r["name"] == "bulk" for r in recs if r["type"] == "span") == 10
    metrics = {r["name"]: r for r in recs if r["type"] == "metric"}
    assert metrics["raydbg.memory.kills"]["points"] == [
        {"attributes": {"reason": "rss"}, "value": 2}
    ]
    assert metrics["sd.train.step.duration"]["points"][0]["count"] == 1
    assert metrics["raydbg.memory.node.used"]["points"][0]["value"] == 123
    snapshot = json.loads(path.with_name(path.stem + ".metrics.json").read_text())
    assert {m["name"] for m in snapshot["metrics"]} >= {"raydbg.memory.kills"}


def test_files_rotate(tmp_path: Path) -> None:
    env = {
        "RAYDBG_TELEMETRY_DIR": str(tmp_path),
        "RAYDBG_TELEMETRY_MAX_BYTES": "50000",
        "RAYDBG_TELEMETRY_BACKUPS": "2",
    }
    path = Path(_run(EMIT, env, "2000")[0])
    files = sorted(tmp_path.glob(path.name + "*"))
    assert [f.name for f in files] == [path.name, path.name + ".1", path.name + ".2"]
    for f in files:
        assert f.stat().st_size < 50000 + 2000
        recs = _records(f)  # every rotated file parses on its own and names its process
        assert recs[0]["type"] == "resource"


def test_switched_off_writes_nothing(tmp_path: Path) -> None:
    code = "from raydbg import telemetry as tm\nassert not tm.setup()\nwith tm.span('x'): pass"
    _run(code, {"RAYDBG_TELEMETRY_DIR": str(tmp_path), "RAYDBG_TELEMETRY": "0"})
    assert list(tmp_path.iterdir()) == []


UNREACHABLE = textwrap.dedent(
    """
    import time
    from raydbg import telemetry as tm
    tm.setup("driver")
    t0 = time.perf_counter()
    for i in range(5000):
        with tm.span("s", i=i):
            pass
    tm.counter("raydbg.x").add(1)
    emit = time.perf_counter() - t0
    import json
    print(json.dumps({"emit_s": emit, **tm.stats()["exporters"]["otlp"]}))
    """
)


@pytest.fixture
def blackhole() -> Any:
    """A loopback port that accepts connections and never answers (a hung collector)."""
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen(512)
    yield sock.getsockname()[1]
    sock.close()


@pytest.mark.parametrize("protocol", ["http/protobuf", "grpc"])
@pytest.mark.parametrize("kind", ["hung", "refused"])
def test_unreachable_exporter_never_blocks(kind: str, protocol: str, blackhole: int) -> None:
    port = blackhole
    if kind == "refused":
        probe = socket.socket()
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
        probe.close()  # nothing listens there now
    env = {
        "OTEL_EXPORTER_OTLP_ENDPOINT": f"http://127.0.0.1:{port}",
        "OTEL_EXPORTER_OTLP_PROTOCOL": protocol,
        "OTEL_EXPORTER_OTLP_TIMEOUT": "5",
        "OTEL_BSP_MAX_QUEUE_SIZE": "200",
        "OTEL_BSP_SCHEDULE_DELAY": "100",
    }
    out, wall = _run(UNREACHABLE, env)
    stats = json.loads(out.splitlines()[-1])
    # The caller's loop runs at in-process speed while exports hang or fail.
    assert stats["emit_s"] < 3.0, stats
    assert stats["exported"] == 0
    # Bounded queue: what could not be queued or sent is counted, nothing is held unbounded.
    assert stats["queued"] <= 200
    assert stats["dropped"] + stats["failed"] + stats["queued"] >= 5000 - 512, stats
    assert stats["dropped"] > 0
    # Exit is bounded too (start-up ~1 s, shutdown waits at most ~3 s per signal).
    assert wall < 15, wall
