"""The span/metric API: one object per metric name, loud on misuse, cheap and silent before setup,
and safe from many threads at once."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from raydbg import telemetry


def test_same_name_same_instrument_and_kind_conflicts() -> None:
    a = telemetry.counter("test.api.same", "{x}")
    assert telemetry.counter("test.api.same") is a
    with pytest.raises(ValueError, match="already exists as a counter"):
        telemetry.gauge("test.api.same")


def test_value_passed_as_unit_is_refused() -> None:
    with pytest.raises(TypeError, match=r"record\(value\)"):
        telemetry.histogram("test.api.slip", 0.25)  # type: ignore[arg-type]


def test_unused_api_is_cheap_silent_and_thread_safe(tmp_path: Path) -> None:
    code = textwrap.dedent(
        """
        import json, sys, threading
        from raydbg import telemetry as tm
        c = tm.counter("test.c")
        h = tm.histogram("test.h", "s")
        for i in range(1000):
            with tm.span("x", i=i):
                c.add(1)
                h.record(0.1)
        # Off (raydbg not active here): the calls paid a check, nothing was built or started.
        off = {"sdk": sorted(m for m in sys.modules if m.startswith("opentelemetry.sdk")),
               "threads": threading.active_count(), "enabled": tm.enabled()}
        tm.setup("driver")  # instruments made before set-up bind now
        def work():
            for i in range(500):
                with tm.span("threaded", i=i):
                    c.add(1, thread=threading.current_thread().name)
        threads = [threading.Thread(target=work) for _ in range(8)]
        for t in threads: t.start()
        for t in threads: t.join()
        tm.flush()
        print(json.dumps({"off": off, **tm.stats()["exporters"]["jsonl"]}))
        """
    )
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OTEL_", "RAYDBG_TELEMETRY", "RAY_DEBUG"))}
    env["RAYDBG_TELEMETRY_DIR"] = str(tmp_path)
    out = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=60
    )
    assert out.returncode == 0, out.stderr
    stats = json.loads(out.stdout)
    # Before setup(), off: the SDK is not even imported, no exporter thread runs (the
    # calls' cost in time is benchmarks/telemetry_overhead.py's).
    assert stats["off"] == {"sdk": [], "threads": 1, "enabled": False}, stats
    # A burst from 8 threads may overrun the bounded queue: every span is exported or counted.
    assert stats["exported"] + stats["dropped"] == 8 * 500 and stats["exported"] >= 2048, stats
    recs = [json.loads(x) for f in tmp_path.glob("*.jsonl") for x in f.read_text().splitlines()]
    assert not any(r.get("name") == "x" for r in recs)  # nothing recorded before set-up
    assert sum(r.get("name") == "threaded" for r in recs) == stats["exported"]
    counts = [r for r in recs if r.get("name") == "test.c"][-1]["points"]
    assert sum(p["value"] for p in counts) == 8 * 500
