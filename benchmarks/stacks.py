"""Benchmark: `raydbg stacks` (grouped, labelled) against `ray stack` on the same 8/32/64 workers.

    .venv/bin/python benchmarks/stacks.py [--sizes 8 32 64] [--repeats 5] [--overhead-pairs 20] [--steps 40]

Workers are plain actors stuck in a sleep (one of them in a different function: the odd
one out), all raydbg-activated. For each size it times, several times over: the gateway's
answer (`GET /api/v1/stacks`, what the TUI pays: the workers' stacks threads answer; also
with `thread=0`, py-spy for every worker as for workers raydbg is not in, and with py-spy
off), the `raydbg stacks --json` CLI end to end (a fresh
Python process, what a user waits for; found through RAY_ADDRESS, and with the gateway
named in RAYDBG_GATEWAY), and `ray stack` (py-spy --native over every
Ray process of this node, one after the other; ungrouped, no Ray identity). `ray stack`
calls `sudo`: where there is none (root in a container), a pass-through `sudo` shim goes
on its PATH. Then what raydbg's gang layer costs a training step while nobody asks for
stacks: in one process, the SD app's tiny preset UNet training step in blocks, with
raydbg's part (the stack hook installed, and a `raydbg.progress()` beat per step, as
`ray.train.report` and step spans give it) on and off in alternating order (paired A/B),
plus an A/A control of two plain blocks, also alternated (`--overhead-pairs 0`: not measured).
Results go to benchmarks/results/stacks.json (or --out).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from common import REPO  # benchmarks/, this script's directory; the repository's root on sys.path
from rich.console import Console
from rich.progress import Progress
from rich.table import Table

RESULTS = REPO / "benchmarks" / "results" / "stacks.json"

STEP_LOOP = r"""
import json, statistics, sys, time
sys.path.insert(0, {repo!r})
import torch
sys.path.insert(0, {repo!r} + "/benchmarks")
from sd_tiny_step import make_step
import raydbg
from raydbg.gang import cooperative_worker
torch.set_num_threads(1)
torch.manual_seed(0)
step = make_step()  # the SD app's tiny preset: its UNet, batch and latent shape

def block(n, beat=False):
    times = []
    for i in range(n):
        t = time.perf_counter()
        step()
        if beat:
            raydbg.progress(i)  # what ray.train.report and a step span do per step
        times.append(time.perf_counter() - t)
    return statistics.median(times)

def with_raydbg(n):
    assert cooperative_worker.install()
    try:
        return block(n, beat=True)
    finally:
        cooperative_worker.uninstall()

block(20)  # warm up
with_raydbg(5)
ab, aa = [], []
for i in range({pairs}):
    # raydbg on/off in alternating order; the A/A control compares two plain blocks,
    # also in alternating order, so that drift within a pair lands on both alike
    if i % 2:
        b = with_raydbg({steps}); a = block({steps})
        a2 = block({steps}); a1 = block({steps})
    else:
        a = block({steps}); b = with_raydbg({steps})
        a1 = block({steps}); a2 = block({steps})
    ab.append(b / a); aa.append(a2 / a1)
print(json.dumps({{"ab": ab, "aa": aa}}))
"""


def stats(xs: list[float]) -> dict[str, Any]:
    return {"median": statistics.median(xs), "max": max(xs), "min": min(xs), "n": len(xs)}


def median_ci(xs: list[float], rounds: int = 2000) -> list[float]:
    """95 % bootstrap interval of the median: whether a ratio differs from 1 beyond noise."""
    rng = random.Random(0)
    meds = sorted(statistics.median(rng.choices(xs, k=len(xs))) for _ in range(rounds))
    return [meds[int(0.025 * rounds)], meds[int(0.975 * rounds) - 1]]


def sudo_shim() -> dict[str, str]:
    env = dict(os.environ)
    path = str(Path(sys.executable).parent) + os.pathsep + env.get("PATH", "")
    if subprocess.run(["sh", "-c", "command -v sudo"], capture_output=True).returncode != 0:
        shim = Path(tempfile.mkdtemp(prefix="raydbg-bench-")) / "sudo"
        shim.write_text('#!/bin/sh\nexec "$@"\n')
        shim.chmod(0o755)
        path = str(shim.parent) + os.pathsep + path
    env["PATH"] = path
    return env


def time_cmd(cmd: list[str], env: dict[str, str]) -> tuple[float, str]:
    t = time.perf_counter()
    out = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=600, cwd=REPO)
    if out.returncode != 0:
        raise RuntimeError(f"{cmd[:3]} failed: {out.stderr[-500:]}")
    return time.perf_counter() - t, out.stdout


def stacks_benchmark(sizes: list[int], repeats: int, progress: Progress) -> list[dict[str, Any]]:
    import ray

    from tests.cluster import ENV, Cluster

    @ray.remote(num_cpus=0)
    class Stuck:
        def stuck(self) -> None:
            while True:
                time.sleep(0.05)

        def odd(self) -> None:
            while True:
                time.sleep(0.05)

        def ready(self) -> int:
            return os.getpid()

    rows = []
    with Cluster(num_cpus=2, env=dict(ENV)) as cluster:
        gw = cluster.up()
        from raydbg import _ray_internals
        from raydbg import progress_records as beats

        t = time.perf_counter()
        _ray_internals.train_runs()  # Train's state actor: absent unless RAY_TRAIN_ENABLE_STATE_TRACKING=1
        state_actor_s = time.perf_counter() - t
        t = time.perf_counter()
        beats.read_all()  # the node's progress records, what each agent reads instead
        progress_s = time.perf_counter() - t
        env = sudo_shim()
        env["RAY_ADDRESS"] = cluster.address
        actors: list[Any] = []
        task = progress.add_task("stacks", total=len(sizes) * repeats * 5)
        for n in sizes:
            progress.update(task, description=f"starting {n} workers")
            while len(actors) < n:
                a = Stuck.remote()
                ray.get(a.ready.remote(), timeout=300)
                (a.odd if not actors else a.stuck).remote()
                actors.append(a)
            time.sleep(1.0)
            gateway, by_pyspy, coop, cli, cli_direct, ray_stack, took = [], [], [], [], [], [], []
            answer: dict[str, Any] = {}
            for _ in range(repeats):
                progress.update(task, description=f"{n} workers: gateway")
                t = time.perf_counter()
                answer = asyncio.run(gw.stacks(timeout=120))
                gateway.append(time.perf_counter() - t)
                took.append(float(answer["took_s"]))
                progress.advance(task)
                progress.update(task, description=f"{n} workers: gateway, py-spy for every worker")
                t = time.perf_counter()
                asyncio.run(gw.stacks(thread=False, timeout=120))
                by_pyspy.append(time.perf_counter() - t)
                progress.advance(task)
                progress.update(task, description=f"{n} workers: gateway, cooperative only")
                t = time.perf_counter()
                asyncio.run(gw.stacks(pyspy=False, timeout=120))
                coop.append(time.perf_counter() - t)
                progress.advance(task)
                progress.update(task, description=f"{n} workers: raydbg stacks --json")
                cli.append(time_cmd([sys.executable, "-m", "raydbg", "stacks", "--json"], env)[0])
                # The gateway named directly (as the head's gateway file does): no GCS lookup.
                cli_direct.append(time_cmd([sys.executable, "-m", "raydbg", "stacks", "--json"],
                                           {**env, "RAYDBG_GATEWAY": gw.address})[0])
                progress.advance(task)
                progress.update(task, description=f"{n} workers: ray stack")
                secs, out = time_cmd([str(Path(sys.executable).with_name("ray")), "stack"], env)
                ray_stack.append(secs)
                progress.advance(task)
            stuck = [w for w in answer["workers"] if str(w.get("actor_name") or "").endswith("Stuck")]
            classes = [c for c in answer["classes"] if any(
                m["pid"] in {w["pid"] for w in stuck} for m in c["members"])]
            rows.append({
                "workers": n, "gateway_s": stats(gateway), "gateway_took_s": stats(took),
                "gateway_cooperative_only_s": stats(coop), "gateway_pyspy_every_worker_s": stats(by_pyspy),
                "train_state_actor_lookup_s": state_actor_s, "progress_records_read_s": progress_s,
                "raydbg_stacks_cli_s": stats(cli), "raydbg_stacks_cli_gateway_named_s": stats(cli_direct), "ray_stack_s": stats(ray_stack),
                "stuck_workers_dumped": len([w for w in stuck if w.get("threads")]),
                "classes_of_stuck": [(c["count"], c["summary"]) for c in classes],
                "errors": answer["errors"][:5],
                "ray_stack_dumps": out.count("Stack dump for"),
                "workers_seen": sorted({str(w.get("actor_name") or w.get("task_name")) for w in answer["workers"]}),
                "sources": sorted({str(w.get("source")) for w in answer["workers"]}),
                "cooperative_formats": sorted({str(w.get("cooperative_format")) for w in answer["workers"]}),
            })
            progress.console.print(rows[-1]["workers_seen"], rows[-1]["classes_of_stuck"], rows[-1]["errors"])
            progress.console.print(f"{n} workers: gateway {statistics.median(gateway):.3f}s, "
                                   f"cli {statistics.median(cli):.3f}s (gateway named {statistics.median(cli_direct):.3f}s), ray stack {statistics.median(ray_stack):.3f}s")
    return rows


def overhead_benchmark(pairs: int, steps: int, progress: Progress) -> dict[str, Any]:
    if pairs <= 0:  # --overhead-pairs 0: nothing to take a median of
        return {"measured": False, "steps_per_block": steps, "pairs": 0}
    task = progress.add_task("A/B step cost (one process, hook toggled)", total=1)
    code = STEP_LOOP.format(repo=str(REPO), steps=steps, pairs=pairs)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=1800,
                         env={**os.environ, "RAYDBG_STACKS_DIR": tempfile.mkdtemp(prefix="raydbg-bench-")})
    if out.returncode != 0:
        raise RuntimeError(out.stderr[-800:])
    got = json.loads(out.stdout)
    progress.advance(task)
    return {
        "measured": True,
        "loop": "SD tiny preset UNet training step (batch 8, 8x8 latents, AdamW), 1 torch thread; B: stack hook + progress() per step; ratio of block medians",
        "steps_per_block": steps, "pairs": pairs,
        "hook_over_plain": {**stats(got["ab"]), "ci95": median_ci(got["ab"]), "ratios": got["ab"]},
        "plain_over_plain_control": {**stats(got["aa"]), "ci95": median_ci(got["aa"]), "ratios": got["aa"]},
    }


def overhead_line(o: dict[str, Any]) -> str:
    """The step-cost line of the report ("not measured" with --overhead-pairs 0)."""
    if not o.get("measured", True):
        return "step cost, raydbg's gang layer on / off: not measured (--overhead-pairs 0)"
    ab, aa = o["hook_over_plain"], o["plain_over_plain_control"]
    return (f"step cost, raydbg's gang layer on / off: median {ab['median']:.4f} "
            f"(95% CI {ab['ci95'][0]:.4f}-{ab['ci95'][1]:.4f}); A/A control {aa['median']:.4f} "
            f"({aa['ci95'][0]:.4f}-{aa['ci95'][1]:.4f}); {o['pairs']} pairs")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[8, 32, 64])
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--overhead-pairs", type=int, default=20)
    parser.add_argument("--steps", type=int, default=40)
    parser.add_argument("--skip-stacks", action="store_true")
    parser.add_argument("--out", type=Path, default=RESULTS, help=f"JSON results (default {RESULTS.relative_to(REPO)})")
    args = parser.parse_args()
    console = Console()
    result: dict[str, Any] = {"when": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
                              "cores": os.cpu_count(), "load_before": os.getloadavg()}
    with Progress(console=console) as progress:
        if not args.skip_stacks:
            result["stacks"] = stacks_benchmark(args.sizes, args.repeats, progress)
        result["overhead"] = overhead_benchmark(args.overhead_pairs, args.steps, progress)
    result["load_after"] = os.getloadavg()
    table = Table(title="raydbg stacks vs ray stack (seconds, median / max)")
    for col in ("workers", "gateway", "gateway, py-spy for all", "gateway, no py-spy", "raydbg stacks (CLI)",
                "ray stack", "ray stack / raydbg", "groups+labels"):
        table.add_column(col)
    for r in result.get("stacks", []):
        g, c, s = r["gateway_s"], r["raydbg_stacks_cli_s"], r["ray_stack_s"]
        k, p = r["gateway_cooperative_only_s"], r["gateway_pyspy_every_worker_s"]
        table.add_row(str(r["workers"]), f"{g['median']:.3f} / {g['max']:.3f}", f"{p['median']:.3f} / {p['max']:.3f}",
                      f"{k['median']:.3f} / {k['max']:.3f}",
                      f"{c['median']:.3f} / {c['max']:.3f}",
                      f"{s['median']:.3f} / {s['max']:.3f}", f"{s['median'] / c['median']:.1f}x",
                      f"raydbg yes ({len(r['classes_of_stuck'])} classes); ray stack no")
    console.print(table)
    console.print(overhead_line(result["overhead"]))
    console.print(f"load average before {result['load_before']}, after {result['load_after']}")
    out = args.out.resolve()
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=2))
    console.print(f"written to {out.relative_to(REPO) if out.is_relative_to(REPO) else out}")


if __name__ == "__main__":
    main()
