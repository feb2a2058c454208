"""The SD reference app end to end on the tiny preset, in a few minutes on a laptop CPU.

make-data -> preprocess (Ray Data; broken rows counted) -> train (Ray Train, 2
workers, FSDP2, a worker killed at step 25 and the run resumed from its latest
checkpoint) -> export (diffusers pipeline) -> sample (PNGs + loss curve).
Run it with RAY_DEBUG=1 to have raydbg active; `--breakpoint-at-step` on the train
command would then pause rank 0 for `raydbg tui` / VS Code.
Environment: SD_WORK (default sd_work/demo; wiped first), SD_DEMO_STEPS (default 40).
"""

from __future__ import annotations

import os
import shutil
import sys
import time
from pathlib import Path

from sd_reference.cli import main


def run(*argv: str) -> None:
    print(f"\n$ python -m sd_reference {' '.join(argv)}", flush=True)
    rc = main(list(argv))
    if rc:
        sys.exit(rc)


if __name__ == "__main__":
    import ray

    root = Path(os.environ.get("SD_WORK", "sd_work/demo"))
    steps = int(os.environ.get("SD_DEMO_STEPS", "40"))
    shutil.rmtree(root, ignore_errors=True)  # a kept run directory would be resumed, not retrained
    start = time.perf_counter()
    # One local cluster for every command; more logical CPUs than cores so the two
    # Train workers and the Data tasks can run at once on a small machine.
    ray.init(num_cpus=8, include_dashboard=False)
    run("make-data", "--out", str(root / "data"), "--num", "128", "--broken", "3")
    run("preprocess", "--input", str(root / "data" / "laion"), "--out", str(root / "latents"))
    run("train", "--data", str(root / "latents"), "--storage-path", str(root / "runs"), "--name", "demo",
        "--workers", "2", "--strategy", "fsdp", "--steps", str(steps), "--checkpoint-every", "10",
        "--inject-failure-at-step", str(max(2, steps * 5 // 8)), "--fingerprint")
    run("sample", "--pipeline", str(root / "runs" / "demo" / "pipeline"), "--out", str(root / "samples"),
        "--steps", "20")
    ray.shutdown()
    print(f"\nSD demo done in {time.perf_counter() - start:.0f}s:\n"
          f"  data         {root / 'data'}\n"
          f"  latents      {root / 'latents'} (manifest.json)\n"
          f"  checkpoints  {root / 'runs' / 'demo'}/step_*\n"
          f"  training log {root / 'runs' / 'demo' / 'train_log.jsonl'}\n"
          f"  pipeline     {root / 'runs' / 'demo' / 'pipeline'}\n"
          f"  images, plot {root / 'samples'} (loss_curve.png)")
