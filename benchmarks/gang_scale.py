"""Benchmark: the gang report's pure parts at the scale STAT works at (thousands of ranks).

    .venv/bin/python benchmarks/gang_scale.py [--ranks 1024 4096] [--repeats 7] [--out FILE]

Synthetic, in one process, no Ray: N ranks' stacks (each a main thread of 30 frames and
two idle threads; most ranks in one all_reduce, a few in a data loader, one stuck
elsewhere) go through `stack_classes.group` and `stack_classes.runs` (what the gateway does with the
agents' answers); the wait-for graph (`wait_for.analyze` + `wait_for.chain`) over N ranks
laid out data x tensor x pipeline (tensor 8, pipeline 4, data N/32: 1 + N/8 + N/4 + 32
process groups, each rank's Flight Recorder view and group table as its stacks thread
sends them), one rank stuck before its tensor-parallel all_reduce: its tensor group waits
in that all_reduce, the stages around it in NCCL send/recv, every other data-parallel
replica in the gradient all_reduce, and the graph must name that rank alone; straggler
judgement over N ranks' step times through `stragglers.judge`, and over N ranks' collective
arrivals (8 steps, 18 collectives a step sampled at 4, rank 3 late at each step's first;
ranks on 8 nodes whose clocks are lined up by the steps' shared releases). Median and max
of the repeats, in ms, against the 200 ms goal. Results to benchmarks/results/gang_scale.json
(or --out).
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

from raydbg.gang import arrivals, collectives, stack_classes, stragglers, wait_chain, wait_for

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


TP, PP = 8, 4  # tensor and pipeline parallel sizes; data parallel is the rest


def stuck_rank(n: int) -> int:
    """The middle replica's stage 1, tensor rank 2: stuck before its tensor all_reduce."""
    return n // (TP * PP) // 2 * TP * PP + 1 * TP + 2


def coords(rank: int) -> tuple[int, int, int]:
    """(data, pipeline, tensor) of a rank, tensor fastest (Megatron's layout)."""
    return rank // (TP * PP), rank // TP % PP, rank % TP


def mesh(n: int) -> dict[int, dict[str, Any]]:
    """Each rank's wait-for graph inputs: its Flight Recorder view (built from a dump by
    collectives.rank_view, as in the rank) and its process-group table."""
    now = time.time_ns()
    dp_size = n // (TP * PP)
    stuck = stuck_rank(n)
    sd, sp, _ = coords(stuck)

    def groups(rank: int) -> dict[str, dict[str, Any]]:
        d, p, t = coords(rank)
        return {"0": {"desc": "default_pg", "ranks": {"start": 0, "step": 1, "count": n}},
                f"tp{d}.{p}": {"desc": "tp", "ranks": {"start": rank - t, "step": 1, "count": TP}},
                f"pp{d}.{t}": {"desc": "pp", "ranks": {"start": rank - p * TP, "step": TP, "count": PP}},
                f"dp{p}.{t}": {"desc": "dp", "ranks": {"start": p * TP + t, "step": TP * PP, "count": dp_size}}}

    def entry(group: str, seq: int, op: str, done: bool, p2p: str | None = None) -> dict[str, Any]:
        return {"collective_seq_id": 0 if p2p else seq, "p2p_seq_id": seq if p2p else 0, "is_p2p": bool(p2p),
                "profiling_name": f"nccl:{p2p or op}", "input_sizes": [[4096]], "input_dtypes": ["BFloat16"],
                "process_group": [group, group[:2]], "retired": done, "state": "completed" if done else "started",
                "time_created_ns": now - 10**9}

    out = {}
    for rank in range(n):
        d, p, t = coords(rank)
        g = groups(rank)
        tp, pp, dp = (name for name in g if name != "0")
        stuck_tp = (d, p) == (sd, sp)
        entries = [entry("0", 1, "broadcast", True)]
        entries += [entry(tp, s, "all_reduce", True) for s in range(1, 40)]  # step 9's ring, the rest gone
        if d == sd:  # the stuck replica: its tensor group waits in #40 for the stuck rank, its stages in send/recv
            if stuck_tp and rank != stuck:
                entries.append(entry(tp, 40, "all_reduce", False))
            elif p == sp + 1:
                entries.append(entry(pp, 7, "", False, p2p=f"recv 1<-{sp}"))  # activations from the stuck stage
            elif p == sp - 1:
                entries.append(entry(pp, 7, "", False, p2p=f"recv 0<-{sp}"))  # gradients back from it
            elif p > sp + 1:
                entries.append(entry(pp, 7, "", False, p2p=f"recv {p}<-{p - 1}"))
            entries += [entry(dp, s, "all_reduce", True) for s in range(1, 9)]
        else:  # every other replica is in step 9's gradient all_reduce
            entries += [entry(tp, 40, "all_reduce", True)]
            entries += [entry(dp, s, "all_reduce", s < 9) for s in range(1, 10)]
        out[rank] = {"collectives": collectives.rank_view({"entries": entries}, now), "process_groups": g}
    return out


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
        ws, ranks, steps, arr = workers(n), mesh(n), step_records(n), arrival_records(n)
        found = wait_for.analyze(ranks, n)
        assert found["culprits"] == [stuck_rank(n)], found["culprits"]  # the benchmark measures a right answer
        assert found["deadlocks"] == [] and len(found["waits"]) == TP * PP + 2 * TP + 1  # dp, pp, tp hops
        assert list(stragglers.judge(steps, stragglers.Settings())) == [3]
        assert list(stragglers.judge(arr, stragglers.Settings())) == [3]

        def graph(ranks: dict[int, dict[str, Any]] = ranks, n: int = n) -> list[str]:
            return wait_chain.chain(wait_for.analyze(ranks, n), lambda r: "load_batch train.py:88")

        for name, fn in (("stack_classes.group + runs", lambda ws=ws: (stack_classes.group(ws), stack_classes.runs(ws))),
                         ("wait_for graph + chain (d x t x p)", graph),
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
