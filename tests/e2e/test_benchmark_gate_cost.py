"""Smoke test: `benchmarks/gate_cost.py` swaps raydbg's per-task code (the gate in a job's two workers, the
driver's submit path) in and out of the same processes and reports."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.e2e

REPO = Path(__file__).resolve().parents[2]


@pytest.mark.timeout(300)
def test_gate_cost_runs_both_kinds_in_the_same_processes(tmp_path: Path) -> None:
    out = tmp_path / "gate_cost.json"
    proc = subprocess.run(
        [sys.executable, str(REPO / "benchmarks" / "gate_cost.py"), "--rounds", "2", "--tasks", "300",
         "--out", str(out)],
        capture_output=True, text=True, timeout=280, cwd=REPO,
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    res = json.loads(out.read_text())
    # Speed is not asserted (a shared machine is too noisy); both kinds ran, each round.
    for kind in ("ray", "raydbg"):
        for part in ("main", "all", "driver"):
            key = f"{kind}.{part}"
            assert len(res["samples_us"][key]) == 2 and all(v > 0 for v in res["samples_us"][key]), key
    assert set(res["raydbg_minus_ray"]) == {"main", "all", "driver"}
    assert "raydbg - Ray's own" in proc.stdout


def test_gate_cost_refuses_a_run_too_short_to_pair() -> None:
    proc = subprocess.run(
        [sys.executable, str(REPO / "benchmarks" / "gate_cost.py"), "--rounds", "1"],
        capture_output=True, text=True, timeout=60, cwd=REPO,
    )
    assert proc.returncode == 2 and "--rounds must be at least 2" in proc.stderr
