"""Benchmark: the gang report's pure parts at the scale STAT works at (thousands of ranks).

    .venv/bin/python benchmarks/gang_scale.py [--ranks 1024 4096] [--repeats 7] [--out FILE]

Synthetic, in one process, no Ray: N ranks' stacks (each a main thread of 30 frames and
two idle threads; most ranks in one all_reduce, a few in a data loader, one stuck
elsewhere) go through `classes.group` and `classes.runs` (what the gateway does with the
agents' answers), and N ranks' Flight Recorder views (rank 7 one collective behind in one
of two groups) through `collectives.disagreement`; straggler judgement over N ranks'
step times through `stragglers.judge`, and over N ranks' collective arrivals (8 steps, 18
collectives a step sampled at 4, rank 3 late at each step's first; ranks on 8 nodes whose
clocks are lined up by the steps' shared releases). Median and max of the repeats, in ms, against the
200 ms goal. Results to benchmarks/results/gang_scale.json (or --out).
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

from raydbg.gang import arrivals, classes, collectives, stragglers

GOAL_MS = 200.0


def frames(kind: str) -> list[dict[str, Any]]:
    base = [{"file": f"/lib/site-packages/ray/mod{i}.py", "function": f"f{i}", "line": 10 + i} for i in range(24)]
    tail = {"collective": [{"file": "/lib/torch/distributed/distributed_c10d.py", "function": "all_reduce", "line": 3252}],
            "loader": [{"file": "/app/data.py", "function": "next_batch", "line": 40}],
            "odd": [{"file": "/app/train.py", "function": "save", "line": 99}]}[kind]
    user = [{"file": "/app/train.py", "function": "train_loop", "line": 77 + i} for i in range(5)]
    return tail + user + base


def workers(n: int) -> list[dict[str, Any]]:
    out = []
    for rank in range(n):
        kind = "odd" if rank == 7 else ("loader" if rank % 97 == 1 else "collective")
        idle = [{"file": "/lib/threading.py", "function": "wait", "line": 320}]
        out.append({"node_id": f"node{rank // 8}", "pid": 1000 + rank, "job_id": "01", "train_run": "big",
                    "world_rank": rank, "world_size": n, "threads": [
                        {"name": "TrainingThread(train_loop)", "frames": frames(kind), "idle": False},
                        {"name": "MainThread", "frames": idle, "idle": True},
                        {"name": "ray_print_logs", "frames": idle, "idle": True}]})
    return out


def views(n: int) -> dict[int, dict[str, Any]]:
    now = time.time_ns()

    def dump(rank: int) -> dict[str, Any]:
        entries = []
        for group, count in (("default_pg", 40), ("tp", 20)):
            last = count - 1 if (rank == 7 and group == "tp") else count
            for seq in range(max(1, last - 12), last + 1):
                entries.append({"collective_seq_id": seq, "profiling_name": "nccl:all_reduce", "input_sizes": [[1024]],
                                "input_dtypes": ["Float"], "is_p2p": False, "process_group": ["0", group],
                                "retired": seq < last, "state": "scheduled", "time_created_ns": now - 10**9})
        return {"entries": entries}

    return {rank: collectives.rank_view(dump(rank), now) for rank in range(n)}


def step_records(n: int) -> dict[int, dict[str, Any]]:
    return {rank: {"step": 100, "busy_s": [0.4 if rank == 3 else 0.1] * 8, "world_rank": rank} for rank in range(n)}


def arrival_records(n: int) -> dict[int, dict[str, Any]]:
    """Each rank's record with its arrivals at 8 steps of 18 collectives; rank 3 0.3 s late at each
    step's first; 8 nodes, node k's clock k x 1.5 s ahead."""
    out = {}
    for rank in range(n):
        skew = (rank % 8) * 1.5
        kept = {}
        for k in range(1, 9):
            start = 100.0 + k
            first = start + 0.1 + (0.3 if rank == 3 else 0.0)
            at = {18 * k + c: (first if c == 0 else start + 0.4 + 0.01 * c) + skew for c in arrivals.sampled(0, 18)}
            kept[k] = arrivals.StepArrivals(start + skew, start + 0.6 + skew, True, 0.0, 0.001, {
                "0": arrivals.GroupArrivals(18 * k, 18, at)})
        now = 110.0 + skew
        out[rank] = {"world_rank": rank, "node_id": f"n{rank % 8}", "step": 8, "ts": now,
                     "arr": arrivals.encode(kept, now)}
    return out


def timed(fn: Callable[[], Any], repeats: int) -> tuple[float, float]:
    took = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        took.append((time.perf_counter() - start) * 1e3)
    return statistics.median(took), max(took)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--ranks", type=int, nargs="+", default=[1024, 4096])
    ap.add_argument("--repeats", type=int, default=7)
    ap.add_argument("--out", type=Path, default=Path(__file__).parent / "results" / "gang_scale.json")
    args = ap.parse_args()
    rows = []
    for n in args.ranks:
        ws, vs, steps, arr = workers(n), views(n), step_records(n), arrival_records(n)
        found = collectives.disagreement(vs)
        assert collectives.culprits(found) == [7], found  # the benchmark measures a right answer
        assert list(stragglers.judge(steps, stragglers.Settings())) == [3]
        assert list(stragglers.judge(arr, stragglers.Settings())) == [3]
        for name, fn in (("classes.group + runs", lambda ws=ws: (classes.group(ws), classes.runs(ws))),
                         ("collectives.disagreement", lambda vs=vs: collectives.disagreement(vs)),
                         ("stragglers.judge", lambda steps=steps: stragglers.judge(steps, stragglers.Settings())),
                         ("stragglers.judge (arrivals)", lambda arr=arr: stragglers.judge(arr, stragglers.Settings()))):
            median, worst = timed(fn, args.repeats)
            rows.append({"ranks": n, "part": name, "median_ms": round(median, 2), "max_ms": round(worst, 2),
                         "goal_ms": GOAL_MS, "met": worst < GOAL_MS})
    table = Table(title="gang report, pure parts (ms)")
    for col in ("ranks", "part", "median_ms", "max_ms", "met"):
        table.add_column(col)
    for r in rows:
        table.add_row(*(str(r[c]) for c in ("ranks", "part", "median_ms", "max_ms", "met")))
    Console().print(table)
    with open("/proc/loadavg") as f:
        load = float(f.read().split()[0])
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps({"load_1m": load, "repeats": args.repeats, "rows": rows}, indent=2))
    print(f"load {load}; wrote {args.out}")


if __name__ == "__main__":
    main()
