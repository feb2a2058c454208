"""Benchmark: `raydbg pause` to a listed session (a rank in a Python loop) and to a listed
snapshot (a rank blocked in C), median and max over `--tries`.

    .venv/bin/python benchmarks/pause_latency.py [--tries 20] [--out FILE]

One local cluster (a driver subprocess with RAY_DEBUG=1: raydbg's agents start with the job)
runs a 2-rank Ray Train run (generic backend, no torch): rank 1 counts in a Python loop
(time.sleep(0.005) per turn), rank 0 sleeps in C (time.sleep(3600)). Each try times the
gateway's POST /api/v1/pause, which answers once the session (or snapshot) is listed,
from the driver, then continues it and waits until it is gone. The first try of each kind
is reported apart: it loads the worker's pause path (debugpy's tracing helper on 3.10/3.11).
Results to benchmarks/results/pause_latency.json (or --out).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

from rich.console import Console

REPO = Path(__file__).resolve().parents[1]

DRIVER = r"""
import asyncio, json, os, statistics, sys, tempfile, threading, time
import ray
from ray.train import RunConfig, ScalingConfig
from ray.train.v2.api.data_parallel_trainer import DataParallelTrainer

tries = int(sys.argv[1])
ray.init(address="local", num_cpus=4, include_dashboard=False, logging_level="ERROR",
         runtime_env={"env_vars": {"RAY_API_SERVER_ADDRESS": "http://127.0.0.1:1", "RAYDBG_RESUME_POLL_S": "0.1"}})

def loop(config):
    import ray.train
    if ray.train.get_context().get_world_rank() == 0:
        time.sleep(3600)  # blocked in C
    n = 0
    while True:
        n += 1
        time.sleep(0.005)

trainer = DataParallelTrainer(loop, scaling_config=ScalingConfig(num_workers=2, resources_per_worker={"CPU": 0.5}),
                              run_config=RunConfig(name="bench-pause", storage_path=tempfile.mkdtemp()))
threading.Thread(target=trainer.fit, daemon=True).start()
from raydbg.client import Gateway
os.environ["RAY_ADDRESS"] = ray.get_runtime_context().gcs_address  # this cluster's gateway, not the latest's

async def main():
    gw = None
    deadline = time.time() + 300
    while time.time() < deadline:
        try:
            gw = gw or Gateway.discover(None, None)
            workers = (await gw.stacks(run="bench-pause", pyspy=False)).get("workers") or []
            if {w.get("world_rank") for w in workers} >= {0, 1}:
                break
        except Exception:
            pass
        await asyncio.sleep(1)
    out = {}
    for kind, target in (("session", "bench-pause:1"), ("snapshot", "bench-pause:0")):
        times = []
        for _ in range(tries):
            start = time.monotonic()
            answer = await gw.pause(target, wait_s=30)
            rec = answer["session"]
            assert rec is not None, answer
            # A running rank that did not get the CPU within the worker's grace is listed as a
            # snapshot first: its time is until the session (same id) is listed.
            while kind == "session" and rec["state"] == "snapshot":
                await asyncio.sleep(0.01)
                rec = next((s for s in await gw.sessions() if s["id"] == rec["id"]), rec)
            took = time.monotonic() - start
            assert (rec["state"] == "snapshot") == (kind == "snapshot"), answer
            times.append(took)
            await gw.continue_session(rec["id"])
            while any(s["id"] == rec["id"] for s in await gw.sessions()):
                await asyncio.sleep(0.05)
        out[kind] = times
    print(json.dumps(out), flush=True)

asyncio.run(main())
os._exit(0)
"""


def summary(times: list[float]) -> dict[str, float]:
    import statistics

    rest = times[1:] or times
    return {"first_s": round(times[0], 4), "median_s": round(statistics.median(rest), 4),
            "max_s": round(max(rest), 4), "tries": len(rest)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tries", type=int, default=20, help="pauses of each kind (default 20), after a first one")
    ap.add_argument("--out", type=Path, default=REPO / "benchmarks" / "results" / "pause_latency.json")
    args = ap.parse_args()
    console = Console()
    env = {**os.environ, "RAY_DEBUG": "1", "RAY_AUTH_MODE": "disabled"}
    env.pop("RAY_ADDRESS", None)
    with console.status(f"one cluster, {args.tries + 1} pauses of each kind…"):
        out = subprocess.run([sys.executable, "-c", DRIVER, str(args.tries + 1)], env=env, cwd=REPO,
                             capture_output=True, text=True, timeout=1200)
    lines = [line for line in out.stdout.splitlines() if line.startswith("{")]
    if out.returncode != 0 or not lines:
        raise SystemExit(f"the driver failed (rc {out.returncode}): {out.stderr[-800:]}")
    raw = json.loads(lines[-1])
    load = os.getloadavg()[0]
    result = {kind: summary(times) for kind, times in raw.items()} | {"load_1m": round(load, 2), "raw": raw}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2))
    for kind in ("session", "snapshot"):
        r = result[kind]
        console.print(f"raydbg pause -> listed {kind}: median {r['median_s']:.3f} s, max {r['max_s']:.3f} s "
                      f"over {r['tries']} (first {r['first_s']:.3f} s)")
    console.print(f"1-minute load average at the end: {load:.2f} ({'quiet' if load < 1 else 'UNDER LOAD'})")


if __name__ == "__main__":
    main()
