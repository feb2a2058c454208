"""`benchmarks/throughput_runs.py` counts only quiet runs with an A/A control within 2 %, and
pools their rounds; bad input gets one line and exit 2."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
SCRIPT = REPO / "benchmarks" / "throughput_runs.py"


def _run_file(path: Path, when: str, load: float, raydbg: float, control: float, rounds: int = 9) -> Path:
    """A debugger.py result whose every round has raydbg and the A/A control at these ratios."""
    plain = [1000.0 + 10 * i for i in range(rounds)]
    samples = {
        "throughput.plain": plain,
        "throughput.raydbg": [p * raydbg for p in plain],
        "throughput.control": [p * control for p in plain],
    }
    ratios = {
        "throughput": raydbg, "throughput.paired": raydbg,
        "throughput.paired.ci_lo": raydbg, "throughput.paired.ci_hi": raydbg,
        "throughput.control": control, "throughput.control.paired": control, "task_cpu": 1.0,
    }
    path.write_text(json.dumps({
        "date": f"2026-12-04 {when}:00 +0000", "machine": {"load_before": [load, 0.0, 0.0]},
        "samples": samples, "ratios": ratios,
    }))
    return path


def _summary(*files: Path) -> dict:
    proc = subprocess.run([sys.executable, str(SCRIPT), *map(str, files), "--json"],
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)


def test_only_quiet_runs_with_a_steady_control_count_and_their_rounds_are_pooled(tmp_path: Path) -> None:
    quiet_low = _run_file(tmp_path / "a.json", "10:00", 0.2, raydbg=0.97, control=1.0)
    quiet_high = _run_file(tmp_path / "b.json", "10:10", 0.3, raydbg=0.99, control=0.99, rounds=12)
    loaded = _run_file(tmp_path / "c.json", "10:20", 1.5, raydbg=1.10, control=1.0)
    noisy_control = _run_file(tmp_path / "d.json", "10:30", 0.1, raydbg=1.10, control=0.97)
    summ = _summary(quiet_low, quiet_high, loaded, noisy_control)
    assert (summ["runs"], summ["counted"]) == (4, 2)
    median, lo, hi = summ["raydbg"]
    # 9 rounds at 0.97 and 12 at 0.99: the pooled median is 0.99 (the uncounted 1.10s left out).
    assert abs(median - 0.99) < 1e-9 and lo <= median <= hi < 1.0
    assert abs(summ["control"][0] - 0.99) < 1e-9
    assert summ["met_by"] == {"ratio_of_medians": 1, "paired": 1, "both": 1}


def test_no_counted_run_is_said_and_a_plot_is_drawn(tmp_path: Path) -> None:
    loaded = _run_file(tmp_path / "c.json", "10:20", 1.5, raydbg=1.0, control=1.0)
    png = tmp_path / "runs.png"
    proc = subprocess.run([sys.executable, str(SCRIPT), str(loaded), "--plot", str(png)],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert "no run counts" in proc.stdout
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_a_file_that_is_not_a_result_gets_one_line_and_exit_2(tmp_path: Path) -> None:
    good = _run_file(tmp_path / "a.json", "10:00", 0.2, raydbg=0.99, control=1.0)
    bad = tmp_path / "notes.json"
    bad.write_text('{"samples": {"throughput.plain": [1.0]}}')
    proc = subprocess.run([sys.executable, str(SCRIPT), str(good), str(bad)],
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2
    assert proc.stderr.count("\n") == 1 and "notes.json" in proc.stderr and not proc.stdout
