"""`benchmarks/sd_gpu.py --dry-run`: the GPU check's plumbing on CPU (tiny preset), so a lent GPU's
10 minutes are not spent finding a typo."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]


@pytest.mark.timeout(300)
def test_sd_gpu_dry_run_writes_json_and_markdown(tmp_path: Path) -> None:
    env = dict(os.environ, PYTHONPATH=str(REPO), OMP_NUM_THREADS="1")
    proc = subprocess.run([sys.executable, str(REPO / "benchmarks" / "sd_gpu.py"), "--dry-run", "--out", str(tmp_path)],
                          capture_output=True, text=True, timeout=280, cwd=tmp_path, env=env)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    res = json.loads((tmp_path / "sd_gpu.json").read_text())
    assert res["dry_run"] is True and res["device"] == "cpu" and res["preset"] == "tiny"
    assert res["train_flops_per_image"] > 0
    configs = {r["config"]: r for r in res["train"]}
    assert list(configs) == ["eager, fp32", "eager, fp32, gradient checkpointing", "torch.compile, fp32"]
    for name in ("eager, fp32", "eager, fp32, gradient checkpointing"):
        r = configs[name]
        assert r["images_per_s"] > 0 and r["loss_finite"] and r["optimizer"] == "fused"
        assert r["mfu"] is None and r["peak_mem_gib"] is None and r["host_syncs_per_step"] is None  # CPU: n/a
    assert configs["torch.compile, fp32"] == {"config": "torch.compile, fp32", "skipped": "dry run"}
    assert res["encoders"]["rows_per_s"] > 0 and res["encoders"]["latents_shape"] == [4, 8, 8]
    md = (tmp_path / "sd_gpu.md").read_text()
    assert md in proc.stdout  # the block is also printed
    assert "| eager, fp32 | " in md and "| torch.compile, fp32 | skipped: dry run |" in md
    assert "rows/s" in md and "Device: cpu" in md


def test_sd_gpu_without_a_gpu_says_so(tmp_path: Path) -> None:
    pytest.importorskip("torch")
    import torch

    if torch.cuda.is_available():
        pytest.skip("a GPU is present")
    proc = subprocess.run([sys.executable, str(REPO / "benchmarks" / "sd_gpu.py"), "--out", str(tmp_path)],
                          capture_output=True, text=True, timeout=120, cwd=tmp_path,
                          env=dict(os.environ, PYTHONPATH=str(REPO)))
    assert proc.returncode == 2 and "no CUDA device" in proc.stdout
