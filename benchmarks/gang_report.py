"""Benchmark: the gang report (`GET /api/v1/stacks?run=NAME`) of a Ray Train run whose ranks are
in collectives, at 8, 32 (and 64) ranks spread over several raylets of this machine. Goal: < 1 s.

    .venv/bin/python benchmarks/gang_report.py [--sizes 8 32] [--raylets 3] [--repeats 5] [--out FILE]

One cluster: the head and `--raylets - 1` more raylets (tests/cluster.py). For each size a
TorchTrainer run (gloo, CPU, Flight Recorder on as raydbg turns it on) whose ranks loop
on an all_reduce and a short sleep; once every rank is in the report with its Flight
Recorder view, the report is taken `--repeats` times (median and max, seconds) and its
`runs[0]` checked: every rank with collectives, no errors. Each rank is a process with
torch loaded (~300 MB here): 64 ranks need ~20 GB, more than a 24 GB machine spares next
to Ray itself, so the default sizes stop at 32. Results to benchmarks/results/gang_report.json.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

from common import REPO  # benchmarks/, this script's directory; the repository's root on sys.path
from rich.console import Console
from rich.progress import Progress


def all_reduce_loop(config: dict[str, Any]) -> None:
    import torch
    import torch.distributed as dist

    t = torch.ones(256)
    stop = Path(config["stop"])
    while not stop.exists():  # every rank checks before the same all_reduce: they leave together
        dist.all_reduce(t)
        time.sleep(0.05)


def measure(gw: Any, run: str, size: int, repeats: int) -> dict[str, Any]:
    def complete(report: dict[str, Any]) -> bool:
        runs = [r for r in report.get("runs") or [] if r.get("run") == run]
        return bool(runs) and len(runs[0]["ranks"]) == size and all(
            r.get("collectives") for r in runs[0]["ranks"])

    deadline = time.monotonic() + 600
    report: dict[str, Any] = {}
    while time.monotonic() < deadline and not complete(report):
        time.sleep(2)
        report = asyncio.run(gw.stacks(run=run, timeout=120))
    if not complete(report):
        raise SystemExit(f"{size} ranks: not every rank in the report with collectives: {report.get('errors')}")
    times, took = [], []
    for _ in range(repeats):
        t = time.perf_counter()
        report = asyncio.run(gw.stacks(run=run, timeout=120))
        times.append(time.perf_counter() - t)
        took.append(float(report["took_s"]))
    nodes = {w.get("node_id") for w in report["workers"]}
    return {"ranks": size, "raylets_used": len(nodes), "median_s": round(statistics.median(times), 4),
            "max_s": round(max(times), 4), "gateway_took_median_s": round(statistics.median(took), 4),
            "errors": report["errors"][:3], "complete": complete(report)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", type=int, nargs="+", default=[8, 32])
    ap.add_argument("--raylets", type=int, default=3)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--out", type=Path, default=REPO / "benchmarks" / "results" / "gang_report.json")
    args = ap.parse_args()
    from ray.train import RunConfig, ScalingConfig
    from ray.train.torch import TorchConfig, TorchTrainer

    from tests.cluster import ENV, Cluster

    console = Console()
    rows = []
    per_raylet = max(args.sizes) // args.raylets + 2
    env = {**ENV, "RAY_API_SERVER_ADDRESS": "http://127.0.0.1:1"}
    with Cluster(num_cpus=per_raylet, env=env, by_value=(sys.modules[__name__],)) as cluster, \
            Progress(console=console) as progress:
        task = progress.add_task("raylets", total=len(args.sizes))
        for _ in range(args.raylets - 1):
            cluster.add_node(num_cpus=per_raylet)
        gw = cluster.up()
        for size in args.sizes:
            progress.update(task, description=f"{size} ranks: starting")
            run = f"bench-gang-{size}"
            stop = Path(tempfile.mkdtemp()) / "stop"
            trainer = TorchTrainer(
                all_reduce_loop, train_loop_config={"stop": str(stop)},
                torch_config=TorchConfig(backend="gloo"),
                scaling_config=ScalingConfig(num_workers=size, resources_per_worker={"CPU": 0.2},
                                             placement_strategy="SPREAD"),  # over every raylet
                run_config=RunConfig(name=run, storage_path=tempfile.mkdtemp()))
            fit = threading.Thread(target=trainer.fit, daemon=True)
            fit.start()
            row = measure(gw, run, size, args.repeats)
            stop.touch()
            fit.join(300)
            rows.append(row)
            progress.console.print(f"{size} ranks on {row['raylets_used']} raylets: report median {row['median_s']:.3f} s, "
                                   f"max {row['max_s']:.3f} s")
            progress.advance(task)
        load = os.getloadavg()[0]
    out = {"rows": rows, "load_1m": round(load, 2)}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(out, indent=2))
    console.print(f"1-minute load average at the end: {load:.2f} ({'quiet' if load < 1 else 'UNDER LOAD'}); "
                  f"results in {args.out}")


if __name__ == "__main__":
    main()
