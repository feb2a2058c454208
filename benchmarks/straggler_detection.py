"""Benchmark: how many steps after a rank starts straggling its `straggler` event comes.

    .venv/bin/python benchmarks/straggler_detection.py [--trials 3] [--ranks 3] [--out FILE]

Each trial is a fresh local cluster (a driver subprocess with RAY_DEBUG=1, so raydbg's
agents start with the job) running a Ray Train run (gloo, CPU) of `--steps` reported
steps of 0.1 s; from step `--slow-from` on, rank 0 works `--extra` s longer each step.
The driver polls the gateway's events and prints the step rank 0 had reported when the
event was recorded (its details carry the steps it judged). Steps to the event = that
step - slow_from + 1; the floor is RAYDBG_STRAGGLER_STEPS (5): the steps it must see.
Results to benchmarks/results/straggler_detection.json (or --out).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path

from rich.console import Console
from rich.progress import Progress

REPO = Path(__file__).resolve().parents[1]

DRIVER = r"""
import asyncio, json, os, sys, tempfile, threading, time
import ray
from ray.train import RunConfig, ScalingConfig
from ray.train.torch import TorchConfig, TorchTrainer

ranks, steps, slow_from, extra = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3]), float(sys.argv[4])
ray.init(address="local", num_cpus=ranks + 2, include_dashboard=False, logging_level="ERROR",
         runtime_env={"env_vars": {"RAY_API_SERVER_ADDRESS": "http://127.0.0.1:1"}})

def loop(config):
    import ray.train
    rank = ray.train.get_context().get_world_rank()
    for step in range(1, config["steps"] + 1):
        time.sleep(0.1 + (config["extra"] if rank == 0 and step >= config["slow_from"] else 0.0))
        ray.train.report({"step": step})

trainer = TorchTrainer(loop, train_loop_config={"steps": steps, "slow_from": slow_from, "extra": extra},
                       torch_config=TorchConfig(backend="gloo"),
                       scaling_config=ScalingConfig(num_workers=ranks, resources_per_worker={"CPU": 0.5}),
                       run_config=RunConfig(name="bench-straggler", storage_path=tempfile.mkdtemp()))
threading.Thread(target=trainer.fit, daemon=True).start()
from raydbg.client import Gateway
os.environ["RAY_ADDRESS"] = ray.get_runtime_context().gcs_address  # this cluster's gateway, not the latest's
found = None
deadline = time.time() + 600
while found is None and time.time() < deadline:
    time.sleep(0.5)
    try:
        events = asyncio.run(Gateway.discover(None, None).events(200))
    except Exception:
        continue
    found = next((e for e in events if e.get("kind") == "straggler"), None)
print(json.dumps(found and {"judged_steps": found["details"]["steps"], "world_rank": found["details"]["world_rank"]}),
      flush=True)
os._exit(0)
"""


def trial(ranks: int, steps: int, slow_from: int, extra: float) -> dict[str, object] | None:
    env = {**os.environ, "RAY_DEBUG": "1", "RAY_AUTH_MODE": "disabled"}
    env.pop("RAY_ADDRESS", None)
    out = subprocess.run([sys.executable, "-c", DRIVER, str(ranks), str(steps), str(slow_from), str(extra)],
                         env=env, cwd=REPO, capture_output=True, text=True, timeout=900)
    lines = [line for line in out.stdout.splitlines() if line.startswith(("{", "null"))]
    if out.returncode != 0 or not lines:
        raise SystemExit(f"the driver failed (rc {out.returncode}): {out.stderr[-600:]}")
    return json.loads(lines[-1])  # type: ignore[no-any-return]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--trials", type=int, default=3)
    ap.add_argument("--ranks", type=int, default=3)
    ap.add_argument("--steps", type=int, default=60)
    ap.add_argument("--slow-from", type=int, default=10)
    ap.add_argument("--extra", type=float, default=0.3)
    ap.add_argument("--out", type=Path, default=Path(__file__).parent / "results" / "straggler_detection.json")
    args = ap.parse_args()
    with open("/proc/loadavg") as f:
        load = float(f.read().split()[0])
    got = []
    with Progress() as progress:
        task = progress.add_task("trials", total=args.trials)
        for _ in range(args.trials):
            got.append(trial(args.ranks, args.steps, args.slow_from, args.extra))
            progress.advance(task)
    to_event = [int(g["judged_steps"][-1]) - args.slow_from + 1 for g in got if g]  # type: ignore[index]
    Console().print(f"steps from the slowdown to the event: {to_event} (median "
                    f"{statistics.median(to_event) if to_event else 'n/a'}; {len(got) - len(to_event)} trial(s) without "
                    f"an event); wrong rank named: {sum(1 for g in got if g and g['world_rank'] != 0)}; load {load}")
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps({"command": " ".join(sys.argv), "load_1m": load, "trials": got,
                                    "steps_to_event": to_event, "slow_from": args.slow_from}, indent=2))
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
