"""What the start gate's hook costs each task, measured in the same worker processes.

    python benchmarks/gate_cost.py [--rounds N] [--tasks N] [--out PATH]

Starts its own local Ray cluster (2 CPUs, a fresh temp dir, token auth off; ray.shutdown()
at the end) and raydbg's agents (the monitor makes the pressure flag the gate maps), and
runs a raydbg job from this process: two workers run its no-op tasks, as in
benchmarks/debugger.py's throughput part. Between rounds a task swaps, in both workers, Ray's
task-start hook between raydbg's gate and Ray's own, so both kinds run in the same
processes (same memory layout, same neighbours) and each round's pair is compared
back to back (ABBA). Figure: the CPU time per task of the workers' main threads and of
the whole processes (/proc/<pid>/task/*/schedstat, nanoseconds), gate minus Ray's own.

Why this and not a difference between two jobs: two drivers' workers differ by a few
microseconds per task by themselves; here only the hook differs.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from proc_cpu import cpu_ns  # benchmarks/, this script's directory

REPO = Path(__file__).resolve().parents[1]
KINDS = ("ray", "gate")


def noop() -> int:
    return os.getpid()


def swap(kind: str) -> int:
    """In a worker: Ray's task-start hook becomes `kind`'s (raydbg's gate, or Ray's own)."""
    import ray

    w = ray._private.worker.global_worker
    gate = getattr(w, "_raydbg_bench_gate", None)
    if gate is None:
        gate = w._raydbg_bench_gate = w.record_task_log_start
    if not getattr(gate, "_raydbg", False):
        raise RuntimeError("raydbg's start gate is not installed in this worker")
    w.record_task_log_start = gate if kind == "gate" else gate._ray_start
    time.sleep(0.05)  # one call per worker: the other worker takes the next
    return os.getpid()


def measure(args: argparse.Namespace) -> dict[str, Any]:
    import ray
    from rich.progress import Progress

    import raydbg
    from raydbg.agent import lifecycle

    os.environ["RAY_AUTH_MODE"] = "disabled"
    tmp = tempfile.mkdtemp(prefix="rdbg-gate-", dir="/tmp")
    load_before = os.getloadavg()
    ray.init(num_cpus=2, _temp_dir=tmp, include_dashboard=False, logging_level=logging.ERROR,
             log_to_driver=False, runtime_env=raydbg.runtime_env())
    try:
        lifecycle.up()
        remote_noop, remote_swap = ray.remote(noop), ray.remote(swap)
        pids = set(ray.get([remote_noop.remote() for _ in range(400)]))
        if len(pids) != 2:
            raise RuntimeError(f"expected 2 task workers, got {sorted(pids)}")

        def set_kind(kind: str) -> None:
            seen: set[int] = set()
            while seen != pids:
                seen |= set(ray.get([remote_swap.remote(kind) for _ in range(4)]))

        for _ in range(3):  # warm-up: workers, imports, the monitor's first flag
            ray.get([remote_noop.remote() for _ in range(2000)])
        per_task: dict[str, list[float]] = {f"{k}.{t}": [] for k in KINDS for t in ("main", "all")}
        with Progress(transient=True) as progress:
            bar = progress.add_task("rounds", total=args.rounds * len(KINDS))
            for r in range(args.rounds):
                for kind in KINDS if r % 2 == 0 else KINDS[::-1]:
                    set_kind(kind)
                    ray.get([remote_noop.remote() for _ in range(300)])
                    before = {m: sum(cpu_ns(p, m) for p in pids) for m in (True, False)}
                    ray.get([remote_noop.remote() for _ in range(args.tasks)])
                    for m, name in ((True, "main"), (False, "all")):
                        spent = sum(cpu_ns(p, m) for p in pids) - before[m]
                        per_task[f"{kind}.{name}"].append(spent / args.tasks / 1e3)
                    progress.advance(bar)
    finally:
        ray.shutdown()
    diffs = {}
    for name in ("main", "all"):
        d = [g - r for g, r in zip(per_task[f"gate.{name}"], per_task[f"ray.{name}"], strict=True)]
        q = statistics.quantiles(d, n=4)
        diffs[name] = {"median_us": round(statistics.median(d), 2), "q1_us": round(q[0], 2),
                       "q3_us": round(q[2], 2), "ray_us": round(statistics.median(per_task[f"ray.{name}"]), 1)}
    return {"benchmark": "gate_cost", "date": time.strftime("%Y-%m-%d %H:%M:%S %z"),
            "command": " ".join(["python", "benchmarks/gate_cost.py", *sys.argv[1:]]),
            "load_before": [round(x, 2) for x in load_before], "rounds": args.rounds, "tasks": args.tasks,
            "gate_minus_ray": diffs, "samples_us": per_task}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--rounds", type=int, default=16, help="rounds per kind (default 16)")
    ap.add_argument("--tasks", type=int, default=4000, help="tasks per round (default 4,000)")
    ap.add_argument("--out", type=Path, default=REPO / "benchmarks" / "results" / "gate_cost.json")
    args = ap.parse_args()
    if args.rounds < 2 or args.tasks < 1:
        ap.error("--rounds must be at least 2 and --tasks at least 1")
    res = measure(args)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(res, indent=2) + "\n")
    load = res["load_before"][0]
    print(f"gate_cost ({res['date']}, load {load} at start{': NOT a quiet machine' if load >= 1 else ''})")
    for name, label in (("main", "main thread"), ("all", "whole process")):
        d = res["gate_minus_ray"][name]
        print(f"  {label:14} Ray's own {d['ray_us']:6.1f} us/task; gate - Ray's own: {d['median_us']:+.2f} us "
              f"(quartiles {d['q1_us']:+.2f} .. {d['q3_us']:+.2f})")
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
