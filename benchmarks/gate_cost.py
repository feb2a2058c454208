"""What raydbg's per-task code costs, measured in the same processes: the start gate's hook in
the workers, and the submit path in the driver.

    python benchmarks/gate_cost.py [--rounds N] [--tasks N] [--out PATH]

Starts its own local Ray cluster (2 CPUs, a fresh temp dir, token auth off; ray.shutdown()
at the end) and raydbg's agents (the monitor makes the pressure flag the gate maps), and
runs a raydbg job from this process: two workers run its no-op tasks, as in
benchmarks/debugger.py's throughput part. Between rounds a task swaps, in both workers, Ray's
task-start hook between raydbg's gate and Ray's own, so both kinds run in the same
processes (same memory layout, same neighbours) and each round's pair is compared
back to back (ABBA). In the same rounds this driver's submit path (`RemoteFunction._remote`,
`signature.flatten_args` and Ray's tracing flag) switches between what raydbg made of it and
what it was before raydbg was activated (with a copy of the task function first called
there: exported as plain Ray exports it). Figures: the CPU time per task of the workers'
main threads and of the whole processes (/proc/<pid>/task/*/schedstat, nanoseconds) and
of this driver (process time), raydbg's minus Ray's own.

Why this and not a difference between two jobs: two drivers' workers differ by a few
microseconds per task by themselves (up to ~10 measured, see docs/memory.md); here only
the code differs.
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
KINDS = ("ray", "raydbg")
PARTS = ("main", "all", "driver")  # the workers' main threads, their whole processes, this driver


def noop() -> int:
    return os.getpid()


def noop_ray() -> int:
    """`noop` for the rounds on Ray's own submit path: first called there, it is exported
    as plain Ray exports it (Ray wraps a function for tracing at its first call while its
    tracing flag is on, which adds a parameter that Ray's own argument check then binds)."""
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
    w.record_task_log_start = gate if kind == "raydbg" else gate._ray_start
    time.sleep(0.05)  # one call per worker: the other worker takes the next
    return os.getpid()


# Where the driver's submit path lives: (module, attribute path) of what raydbg replaces.
SUBMIT_PATH = (
    ("ray.remote_function", ("RemoteFunction", "_remote")),
    ("ray._common.signature", ("flatten_args",)),
    ("ray.util.tracing.tracing_helper", ("_global_is_tracing_enabled",)),
)


def submit_path() -> list[Any]:
    """The driver's submit path as it is now (see SUBMIT_PATH)."""
    import importlib

    out = []
    for module, attrs in SUBMIT_PATH:
        obj: Any = importlib.import_module(module)
        for a in attrs:
            obj = getattr(obj, a)
        out.append(obj)
    return out


def use_submit_path(values: list[Any]) -> None:
    import importlib

    for (module, attrs), value in zip(SUBMIT_PATH, values, strict=True):
        obj: Any = importlib.import_module(module)
        for a in attrs[:-1]:
            obj = getattr(obj, a)
        setattr(obj, attrs[-1], value)


def measure(args: argparse.Namespace) -> dict[str, Any]:
    import ray
    from rich.progress import Progress

    import raydbg
    from raydbg.agent_host import lifecycle

    os.environ["RAY_AUTH_MODE"] = "disabled"
    tmp = tempfile.mkdtemp(prefix="rdbg-gate-", dir="/tmp")
    load_before = os.getloadavg()
    rays_submit = submit_path()  # before raydbg's activation touches it
    ray.init(num_cpus=2, _temp_dir=tmp, include_dashboard=False, logging_level=logging.ERROR,
             log_to_driver=False, runtime_env=raydbg.runtime_env())
    submit = {"ray": rays_submit, "raydbg": submit_path()}
    try:
        lifecycle.up()
        remote_swap = ray.remote(swap)
        use_submit_path(submit["ray"])
        tasks = {"ray": ray.remote(noop_ray), "raydbg": ray.remote(noop)}
        ray.get(tasks["ray"].remote())
        use_submit_path(submit["raydbg"])
        pids = {pid for f in tasks.values() for pid in ray.get([f.remote() for _ in range(2000)])}
        if len(pids) != 2:
            raise RuntimeError(f"expected 2 task workers, got {sorted(pids)}")

        def set_kind(kind: str) -> None:
            seen: set[int] = set()
            while seen != pids:
                seen |= set(ray.get([remote_swap.remote(kind) for _ in range(4)]))
            use_submit_path(submit[kind])

        for kind in KINDS * 2:  # warm-up: workers, imports, the monitor's first flag
            set_kind(kind)
            ray.get([tasks[kind].remote() for _ in range(2000)])
        per_task: dict[str, list[float]] = {f"{k}.{t}": [] for k in KINDS for t in PARTS}
        with Progress(transient=True) as progress:
            bar = progress.add_task("rounds", total=args.rounds * len(KINDS))
            for r in range(args.rounds):
                for kind in KINDS if r % 2 == 0 else KINDS[::-1]:
                    set_kind(kind)
                    ray.get([tasks[kind].remote() for _ in range(300)])
                    before = {m: sum(cpu_ns(p, m) for p in pids) for m in (True, False)}
                    driver = time.process_time_ns()
                    ray.get([tasks[kind].remote() for _ in range(args.tasks)])
                    per_task[f"{kind}.driver"].append((time.process_time_ns() - driver) / args.tasks / 1e3)
                    for m, name in ((True, "main"), (False, "all")):
                        spent = sum(cpu_ns(p, m) for p in pids) - before[m]
                        per_task[f"{kind}.{name}"].append(spent / args.tasks / 1e3)
                    progress.advance(bar)
    finally:
        ray.shutdown()
    diffs = {}
    for name in PARTS:
        d = [g - r for g, r in zip(per_task[f"raydbg.{name}"], per_task[f"ray.{name}"], strict=True)]
        q = statistics.quantiles(d, n=4)
        diffs[name] = {"median_us": round(statistics.median(d), 2), "q1_us": round(q[0], 2),
                       "q3_us": round(q[2], 2), "ray_us": round(statistics.median(per_task[f"ray.{name}"]), 1)}
    return {"benchmark": "gate_cost", "date": time.strftime("%Y-%m-%d %H:%M:%S %z"),
            "command": " ".join(["python", "benchmarks/gate_cost.py", *sys.argv[1:]]),
            "load_before": [round(x, 2) for x in load_before], "rounds": args.rounds, "tasks": args.tasks,
            "raydbg_minus_ray": diffs, "samples_us": per_task}


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
    for name, label in (("main", "workers, main thread (the gate)"), ("all", "workers, whole processes"),
                        ("driver", "driver (the submit path)")):
        d = res["raydbg_minus_ray"][name]
        print(f"  {label:32} Ray's own {d['ray_us']:6.1f} us/task; raydbg - Ray's own: {d['median_us']:+.2f} us "
              f"(quartiles {d['q1_us']:+.2f} .. {d['q3_us']:+.2f})")
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
