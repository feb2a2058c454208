"""Benchmark: what torch's Flight Recorder (on in raydbg-activated Train ranks), and raydbg's reading of it each step, cost a training step.

    .venv/bin/python benchmarks/flight_recorder_cost.py [--pairs 10] [--steps 200] [--compare recorder sampling]
        [--ring 2000] [--out FILE]

Two gloo ranks (separate processes, as Train runs them), in trials of `--steps` steps each.
`--compare recorder`: Flight Recorder on (TORCH_FR_BUFFER_SIZE=`--ring`, raydbg's default
2000) or off. `--compare sampling`: both with the recorder on and a progress beat after each
step (`raydbg.progress()`: one record pwrite), with or without raydbg's arrival reader
(raydbg/gang/arrival_reader.py: it dumps the ring at most every second and at most 1 % of the
rank's CPU time, and summarizes each step's arrivals into the record). The two kinds alternate,
in random order within each pair (paired A/B), and an A/A control runs two trials of the
baseline kind (off; beats without the reader) the same way. Two loops:
- `collectives`: a step is 20 `all_reduce`s of 256 floats (collective-heavy: the recorder's
  per-collective cost is as large a share of the step as it can be);
- `sd_tiny`: the SD reference app's tiny preset UNet, its training step (noise, forward,
  MSE, backward, AdamW) under DistributedDataParallel (gradient all_reduce in buckets),
  `--steps / 10` steps a trial;
- `ddp` (not run unless named): a small MLP under DistributedDataParallel.
Each trial's time per step is rank 0's (after 20 warm-up steps). The ratio and the A/A ratio:
median of the per-pair ratios with a 95 % bootstrap interval (benchmarks/paired_stats.py).
Goal: within noise, at most 1 %. With the reader, rank 0 also reports its reads (how many,
their median CPU ms) and how many steps its record carried arrivals for.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import subprocess
import sys
import tempfile
import textwrap
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.progress import Progress
from rich.table import Table

sys.path.insert(0, str(Path(__file__).parent))
from common import free_port  # noqa: E402
from paired_stats import paired, paired_ci  # noqa: E402

RANK = textwrap.dedent("""
    import json, os, sys, time
    import torch, torch.distributed as dist
    rank, loop, steps, kind = int(sys.argv[1]), sys.argv[2], int(sys.argv[3]), sys.argv[4]
    dist.init_process_group("gloo", rank=rank, world_size=2)
    beat, reads = (lambda: None), []
    if kind in ("beats", "sampled"):  # a progress beat per step; with the reader: raydbg's arrivals too
        sys.path.insert(0, os.environ["RAYDBG_REPO"])
        from raydbg import progress_records as progress
        progress._identity = lambda: {"job_id": "bench", "train_run": "fr-cost", "world_rank": rank}
        if kind == "sampled":
            from raydbg.gang import arrival_reader
            arrival_reader.worker_setup()
            def on_step(*args, _on=arrival_reader._reader.on_step):
                out = _on(*args)
                if arrival_reader._reader.last_read_s and out is not None:
                    reads.append(arrival_reader._reader.last_read_s)
                    arrival_reader._reader.last_read_s = 0.0
                return out
            progress.STEP_LISTENERS[:] = [on_step]
        beat = progress.beat
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
        beat()
    dist.barrier()
    reads.clear()
    start = time.perf_counter()
    for _ in range(steps):
        step()
        beat()
    took = (time.perf_counter() - start) / steps
    if rank == 0:
        arr = []
        if kind == "sampled":
            rec = json.loads(open(progress.progress_dir() / str(os.getpid()), "rb").read())
            arr = rec.get("arr") or []
        print(json.dumps({"s": took, "reads": reads, "arr_steps": len(arr)}), flush=True)
    if kind in ("beats", "sampled"):
        progress.done()
    dist.destroy_process_group()
""")


KINDS = {"recorder": ("on", "off"), "sampling": ("sampled", "beats")}  # (B, A): A is the A/A control's


def trial(loop: str, steps: int, kind: str, ring: int, progress_base: str) -> dict[str, Any]:
    env = {**os.environ, "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(free_port()), "OMP_NUM_THREADS": "1",
           "RAYDBG_REPO": str(Path(__file__).resolve().parents[1]), "RAYDBG_PROGRESS_BASE": progress_base}
    if loop == "sd_tiny":
        steps = max(10, steps // 10)  # a UNet step is ~10x a small loop's
    env.pop("TORCH_FR_BUFFER_SIZE", None)
    if kind != "off":
        env["TORCH_FR_BUFFER_SIZE"] = str(ring)
    procs = [subprocess.Popen([sys.executable, "-c", RANK, str(r), loop, str(steps), kind], env=env,
                              stdout=subprocess.PIPE, text=True) for r in range(2)]
    outs = [p.communicate(timeout=600)[0] for p in procs]
    if any(p.returncode for p in procs):
        raise SystemExit(f"a rank failed (exit codes {[p.returncode for p in procs]})")
    return dict(json.loads(outs[0].strip().splitlines()[-1]))


def ratio(num: list[float], den: list[float]) -> dict[str, float]:
    low, high = paired_ci(num, den)
    return {"ratio": paired(num, den), "low": low, "high": high}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--pairs", type=int, default=10)
    ap.add_argument("--steps", type=int, default=200)
    ap.add_argument("--loops", nargs="+", default=["collectives", "sd_tiny"], choices=["collectives", "ddp", "sd_tiny"])
    ap.add_argument("--compare", nargs="+", default=["recorder"], choices=list(KINDS))
    ap.add_argument("--ring", type=int, default=2000, help="Flight Recorder entries (TORCH_FR_BUFFER_SIZE)")
    ap.add_argument("--out", type=Path, default=Path(__file__).parent / "results" / "flight_recorder_cost.json")
    args = ap.parse_args()
    with open("/proc/loadavg") as f:
        load_before = float(f.read().split()[0])
    results: dict[str, Any] = {}
    base = tempfile.mkdtemp(prefix="raydbg-fr-cost-")
    with Progress() as progress:
        task = progress.add_task("trials", total=len(args.loops) * len(args.compare) * args.pairs * 4)
        for compare in args.compare:
            b_kind, a_kind = KINDS[compare]
            for loop in args.loops:
                got: dict[str, list[dict[str, Any]]] = {b_kind: [], a_kind: [], "aa1": [], "aa2": []}
                for _ in range(args.pairs):
                    for kind in random.sample([b_kind, a_kind], 2):  # A/B in random order
                        got[kind].append(trial(loop, args.steps, kind, args.ring, base))
                        progress.advance(task)
                    got["aa1"].append(trial(loop, args.steps, a_kind, args.ring, base))  # A/A
                    got["aa2"].append(trial(loop, args.steps, a_kind, args.ring, base))
                    progress.advance(task, 2)
                s = {k: [t["s"] for t in v] for k, v in got.items()}
                reads = [r for t in got.get("sampled", []) for r in t["reads"]]
                results[f"{compare}:{loop}"] = {
                    "compare": compare, "loop": loop, "b": b_kind, "a": a_kind, **{f"{k}_s": v for k, v in s.items()},
                    "ratio": ratio(s[b_kind], s[a_kind]), "aa": ratio(s["aa1"], s["aa2"]),
                    "reads_per_trial": [len(t["reads"]) for t in got.get("sampled", [])],
                    "read_cpu_ms_median": round(statistics.median(reads) * 1e3, 3) if reads else None,
                    "arr_steps": [t["arr_steps"] for t in got.get("sampled", [])]}
    with open("/proc/loadavg") as f:
        load_after = float(f.read().split()[0])
    table = Table(title=f"time per step, 2 gloo ranks, ring {args.ring}: recorder on/off; sampling: the arrival "
                        "reader with beats / beats alone")
    for col in ("compare", "loop", "A ms/step (median)", "B/A (95 %)", "A/A (95 %)", "reads a trial", "read CPU ms"):
        table.add_column(col)
    for r in results.values():
        a_ms = statistics.median(r[f"{r['a']}_s"]) * 1e3
        fmt = "{0[ratio]:.4f} ({0[low]:.4f}-{0[high]:.4f})"
        table.add_row(r["compare"], r["loop"], f"{a_ms:.3f}", fmt.format(r["ratio"]), fmt.format(r["aa"]),
                      str(statistics.median(r["reads_per_trial"])) if r["reads_per_trial"] else "-",
                      str(r["read_cpu_ms_median"] or "-"))
    Console().print(table)
    print(f"load average {load_before} before, {load_after} after")
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps({"command": " ".join(sys.argv), "load_before": load_before,
                                    "load_after": load_after, "pairs": args.pairs, "steps": args.steps, "ring": args.ring,
                                    "results": results}, indent=2))
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
