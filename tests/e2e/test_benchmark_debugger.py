"""Smoke test: `benchmarks/debugger.py --quick` runs end to end (~1 min) and writes its JSON."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.e2e

REPO = Path(__file__).resolve().parents[2]


@pytest.mark.timeout(400)
def test_debugger_benchmark_quick(tmp_path: Path) -> None:
    out = tmp_path / "debugger.json"
    proc = subprocess.run(
        [sys.executable, str(REPO / "benchmarks" / "debugger.py"), "--quick", "--out", str(out),
         "--variant", "nobudgets=RAYDBG_MEMORY_BUDGETS=0", "--env-control", "--markdown"],
        capture_output=True, text=True, timeout=380, cwd=REPO,
    )
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-4000:]
    res = json.loads(out.read_text())
    samples = res["samples"]
    for key in ("throughput.raydbg", "throughput.plain", "pause.raydbg.listed.cold", "pause.raydbg.listed.warm",
                "pause.builtin.cold", "pause.builtin.warm", "attach_ms.raydbg", "attach_ms.builtin",
                "spin.calls.raydbg.paused", "spin.calls.raydbg.fresh", "spin.loop.builtin.paused",
                "throughput.nobudgets", "task_cpu_us.driver.nobudgets", "throughput.plainenv",
                "task_cpu_us.workers.plainenv"):
        assert samples.get(key), key
    # Behaviour, not speed (a shared machine is too noisy to assert figures): raydbg removes
    # its tracer once the client has gone, Ray's built-in leaves it installed.
    assert samples["tracer_left.raydbg"] == [0.0], res["notes"]  # the notes say why it was left
    assert samples["tracer_left.builtin"] == [1.0]
    assert "Debugger benchmark" in proc.stdout
    assert res["config"]["variants"] == {"nobudgets": {"RAYDBG_MEMORY_BUDGETS": "0"}}
    assert res["ratios"]["throughput.nobudgets.paired"] > 0
    assert res["config"]["env_control"] is True
    assert res["ratios"]["throughput.vs_plainenv.paired"] > 0
    assert "ratio raydbg / plain Ray with a runtime_env (paired, interval) |" in proc.stdout  # the Markdown table


@pytest.mark.parametrize("spec", ["nobudgets", "raydbg=RAYDBG_X=1", "x=RAYDBG_X", "x=", "1x=A=1"])
def test_a_bad_variant_is_one_clear_error(spec: str) -> None:
    proc = subprocess.run(
        [sys.executable, str(REPO / "benchmarks" / "debugger.py"), "--variant", spec],
        capture_output=True, text=True, timeout=60, cwd=REPO,
    )
    assert proc.returncode == 2 and "expected NAME=KEY=VALUE" in proc.stderr, proc.stderr
