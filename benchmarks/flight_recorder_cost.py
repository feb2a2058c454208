"""Benchmark: what torch's Flight Recorder (on in raydbg-activated Train ranks) costs a training step.

    .venv/bin/python benchmarks/flight_recorder_cost.py [--pairs 10] [--steps 200] [--out FILE]

Two gloo ranks (separate processes, as Train runs them), in trials of `--steps` steps each,
with Flight Recorder on (TORCH_FR_BUFFER_SIZE=2000, raydbg's default) or off; the kinds
alternate, in random order within each pair (paired A/B), and an A/A control runs two off
trials the same way. Two loops:
- `collectives`: a step is 20 `all_reduce`s of 256 floats (collective-heavy: the recorder's
  per-collective cost is as large a share of the step as it can be);
- `sd_tiny`: the SD reference app's tiny preset UNet, its training step (noise, forward,
  MSE, backward, AdamW) under DistributedDataParallel (gradient all_reduce in buckets),
  `--steps / 10` steps a trial;
- `ddp` (not run unless named): a small MLP under DistributedDataParallel.
Each trial's time per step is rank 0's (after 20 warm-up steps). The ratio on/off and the
A/A ratio: median of the per-pair ratios with a 95 % bootstrap interval
(benchmarks/paired_stats.py). Goal: within noise, at most 1 %.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import socket
import subprocess
import sys
import textwrap
from pathlib import Path

from rich.console import Console
from rich.progress import Progress
from rich.table import Table

sys.path.insert(0, str(Path(__file__).parent))
from paired_stats import paired, paired_ci  # noqa: E402

RANK = textwrap.dedent("""
    import os, sys, time
    import torch, torch.distributed as dist
    rank, loop, steps = int(sys.argv[1]), sys.argv[2], int(sys.argv[3])
    dist.init_process_group("gloo", rank=rank, world_size=2)
    torch.manual_seed(0)
    torch.set_num_threads(1)
    if loop == "sd_tiny":  # the SD app's tiny preset UNet, its training step under DDP
        sys.path[:0] = [os.environ["RAYDBG_REPO"], os.path.join(os.environ["RAYDBG_REPO"], "benchmarks")]
        from torch.nn.parallel import DistributedDataParallel as DDP
        from sd_tiny_step import make_step
        step = make_step(DDP)
    elif loop == "ddp":
        from torch.nn.parallel import DistributedDataParallel as DDP
        model = DDP(torch.nn.Sequential(torch.nn.Linear(256, 512), torch.nn.ReLU(), torch.nn.Linear(512, 256)))
        opt = torch.optim.SGD(model.parameters(), lr=0.01)
        x = torch.randn(64, 256)
        def step():
            opt.zero_grad()
            model(x).square().mean().backward()
            opt.step()
    else:
        t = torch.ones(256)
        def step():
            for _ in range(20):
                dist.all_reduce(t)
    for _ in range(20):
        step()
    dist.barrier()
    start = time.perf_counter()
    for _ in range(steps):
        step()
    took = (time.perf_counter() - start) / steps
    if rank == 0:
        print(took, flush=True)
    dist.destroy_process_group()
""")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def trial(loop: str, steps: int, recorder: bool) -> float:
    env = {**os.environ, "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(free_port()), "OMP_NUM_THREADS": "1",
           "RAYDBG_REPO": str(Path(__file__).resolve().parents[1])}
    if loop == "sd_tiny":
        steps = max(10, steps // 10)  # a UNet step is ~10x a small loop's
    env.pop("TORCH_FR_BUFFER_SIZE", None)
    if recorder:
        env["TORCH_FR_BUFFER_SIZE"] = "2000"
    procs = [subprocess.Popen([sys.executable, "-c", RANK, str(r), loop, str(steps)], env=env,
                              stdout=subprocess.PIPE, text=True) for r in range(2)]
    outs = [p.communicate(timeout=600)[0] for p in procs]
    if any(p.returncode for p in procs):
        raise SystemExit(f"a rank failed (exit codes {[p.returncode for p in procs]})")
    return float(outs[0].strip())


def ratio(num: list[float], den: list[float]) -> dict[str, float]:
    low, high = paired_ci(num, den)
    return {"ratio": paired(num, den), "low": low, "high": high}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--pairs", type=int, default=10)
    ap.add_argument("--steps", type=int, default=200)
    ap.add_argument("--loops", nargs="+", default=["collectives", "sd_tiny"], choices=["collectives", "ddp", "sd_tiny"])
    ap.add_argument("--out", type=Path, default=Path(__file__).parent / "results" / "flight_recorder_cost.json")
    args = ap.parse_args()
    with open("/proc/loadavg") as f:
        load_before = float(f.read().split()[0])
    results = {}
    with Progress() as progress:
        task = progress.add_task("trials", total=len(args.loops) * args.pairs * 4)
        for loop in args.loops:
            on, off, a1, a2 = [], [], [], []
            for _ in range(args.pairs):
                for first_on in random.sample([True, False], 2):  # A/B in random order
                    (on if first_on else off).append(trial(loop, args.steps, first_on))
                    progress.advance(task)
                pair = [trial(loop, args.steps, False), trial(loop, args.steps, False)]  # A/A
                a1.append(pair[0])
                a2.append(pair[1])
                progress.advance(task, 2)
            results[loop] = {"on_s": on, "off_s": off, "aa1_s": a1, "aa2_s": a2,
                             "on_off": ratio(on, off), "aa": ratio(a1, a2)}
    with open("/proc/loadavg") as f:
        load_after = float(f.read().split()[0])
    table = Table(title="Flight Recorder on / off, time per step (2 gloo ranks)")
    for col in ("loop", "off ms/step (median)", "on/off (95 %)", "A/A (95 %)"):
        table.add_column(col)
    for loop, r in results.items():
        off_ms = sorted(r["off_s"])[len(r["off_s"]) // 2] * 1e3
        fmt = "{0[ratio]:.4f} ({0[low]:.4f}-{0[high]:.4f})"
        table.add_row(loop, f"{off_ms:.3f}", fmt.format(r["on_off"]), fmt.format(r["aa"]))
    Console().print(table)
    print(f"load average {load_before} before, {load_after} after")
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps({"command": " ".join(sys.argv), "load_before": load_before,
                                    "load_after": load_after, "pairs": args.pairs, "steps": args.steps,
                                    "results": results}, indent=2))
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
