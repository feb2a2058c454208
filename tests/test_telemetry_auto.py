"""Automatic set-up (no Ray needed): the first emission sets telemetry up where raydbg is active,
nowhere else; the switches still turn it off; a user's own tracer provider stays the global one."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

EMIT = textwrap.dedent(
    """
    import json, sys
    from raydbg import telemetry as tm
    before = "opentelemetry.sdk.trace" in sys.modules
    with tm.span("auto.first", n=1):
        tm.counter("auto.calls", "{call}").add(1)
    from raydbg.telemetry import provider
    print(json.dumps({"sdk_before": before, "enabled": tm.enabled(), "kind": provider.state.kind,
                      "path": tm.stats()["jsonl_path"]}))
    """
)


def _run(code: str, tmp_path: Path, **env: str) -> dict[str, object]:
    base = {k: v for k, v in os.environ.items()
            if not k.startswith(("OTEL_", "RAYDBG_TELEMETRY", "RAY_DEBUG"))}
    out = subprocess.run(
        [sys.executable, "-c", code],
        env={**base, "RAYDBG_TELEMETRY_DIR": str(tmp_path), **env},
        capture_output=True, text=True, timeout=60,
    )
    assert out.returncode == 0, out.stderr
    result: dict[str, object] = json.loads(out.stdout.splitlines()[-1])
    return result


def test_first_emission_sets_up_where_raydbg_is_active(tmp_path: Path) -> None:
    r = _run(EMIT, tmp_path, RAY_DEBUG="1")
    # Nothing was imported before the first span; that span set up a "driver" (no Ray here).
    assert r["sdk_before"] is False and r["enabled"] is True and r["kind"] == "driver"
    path = Path(str(r["path"]))
    assert path.parent == tmp_path and path.name == f"driver-{path.name.split('-')[1]}"
    recs = [json.loads(x) for x in path.read_text().splitlines()]
    assert recs[0]["attributes"]["raydbg.process"] == "driver"
    assert any(x.get("name") == "auto.first" for x in recs)
    assert any(x.get("name") == "auto.calls" for x in recs)  # flushed at exit


def test_no_automatic_set_up_without_raydbg_or_when_switched_off(tmp_path: Path) -> None:
    for env in ({}, {"RAY_DEBUG": "1", "RAYDBG_TELEMETRY": "0"},
                {"RAY_DEBUG": "1", "OTEL_SDK_DISABLED": "true"}):
        r = _run(EMIT, tmp_path, **env)
        assert r["enabled"] is False, env
    assert list(tmp_path.iterdir()) == []


def test_a_users_tracer_provider_stays_global(tmp_path: Path) -> None:
    code = textwrap.dedent(
        """
        import json
        from opentelemetry import trace
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import SimpleSpanProcessor
        from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
        mine = TracerProvider()
        exported = InMemorySpanExporter()
        mine.add_span_processor(SimpleSpanProcessor(exported))
        trace.set_tracer_provider(mine)
        from raydbg import telemetry as tm
        with trace.get_tracer("user").start_as_current_span("user.outer"):
            with tm.span("auto.inner"):
                pass
        tm.flush()
        print(json.dumps({"still_mine": trace.get_tracer_provider() is mine,
                          "user_saw": [s.name for s in exported.get_finished_spans()],
                          "path": tm.stats()["jsonl_path"]}))
        """
    )
    r = _run(code, tmp_path, RAY_DEBUG="1")
    assert r["still_mine"] is True and r["user_saw"] == ["user.outer"]
    spans = [json.loads(x) for x in Path(str(r["path"])).read_text().splitlines()]
    inner = [s for s in spans if s.get("name") == "auto.inner"]
    assert len(inner) == 1 and inner[0]["parent_id"] is not None  # under the user's span
