"""`benchmarks/stacks.py --overhead-pairs 0` reports the step cost as not measured (it crashed on
the median of no ratios); run with --skip-stacks, so no cluster and no UNet are needed."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def test_overhead_pairs_zero_is_not_measured(tmp_path: Path) -> None:
    out = tmp_path / "stacks.json"
    proc = subprocess.run([sys.executable, str(REPO / "benchmarks" / "stacks.py"), "--skip-stacks",
                           "--overhead-pairs", "0", "--out", str(out)],
                          capture_output=True, text=True, timeout=120, cwd=REPO)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    assert "not measured (--overhead-pairs 0)" in proc.stdout
    assert json.loads(out.read_text())["overhead"] == {"measured": False, "steps_per_block": 40, "pairs": 0}
