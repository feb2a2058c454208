"""A driver's time to its first task result, with raydbg starting the agents (RAYDBG_AGENTS=auto) and without.

Each trial is a fresh local cluster (`ray.init(address="local")` in a driver subprocess with
RAY_DEBUG=1), so the agents are never there already: "auto" starts them in the background
once the first result is in (or 2 s after connect, whichever is first), "off" does not. A second "off" driver is the A/A control. The
kinds take turns in every round (a Latin square), on one host, side by side.

    .venv/bin/python benchmarks/first_task.py [--rounds 5] [--out benchmarks/results/first_task.json]

Prints, per kind, the median seconds from connected to the first result, from start to
connected, and from the result to the process's exit (an "auto" driver waits for its agent
start at exit, bounded), and the ratios auto / off and off (A/A) / off.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
KINDS = {"auto": "auto", "off": "off", "off_aa": "off"}

DRIVER = """
import json, sys, time
t0 = time.perf_counter()
import ray
ray.init(address="local", num_cpus=2, include_dashboard=False, logging_level="ERROR")
t1 = time.perf_counter()
@ray.remote
def first():
    return 1
ray.get(first.remote())
t2 = time.perf_counter()
print(json.dumps({"connect_s": t1 - t0, "first_task_s": t2 - t1}), flush=True)
"""


def trial(agents: str) -> dict[str, float]:
    env = {**os.environ, "RAY_DEBUG": "1", "RAYDBG_AGENTS": agents, "RAY_AUTH_MODE": "disabled"}
    env.pop("RAY_ADDRESS", None)
    proc = subprocess.Popen([sys.executable, "-c", DRIVER], env=env, cwd=REPO, stdout=subprocess.PIPE,
                            stderr=subprocess.DEVNULL, text=True)
    assert proc.stdout is not None
    line = proc.stdout.readline()
    printed = time.perf_counter()
    proc.wait(timeout=180)
    if proc.returncode != 0 or not line.strip():
        raise SystemExit(f"benchmarks/first_task.py: the {agents} driver failed (rc {proc.returncode})")
    return dict(json.loads(line), exit_s=time.perf_counter() - printed)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--out", default=str(REPO / "benchmarks/results/first_task.json"))
    args = p.parse_args(argv)
    from rich.progress import Progress

    names = list(KINDS)
    runs: dict[str, list[dict[str, float]]] = {n: [] for n in names}
    load = os.getloadavg()[0]
    with Progress() as progress:
        task = progress.add_task("fresh clusters", total=args.rounds * len(names))
        for r in range(args.rounds):
            for name in names[r % len(names):] + names[:r % len(names)]:
                runs[name].append(trial(KINDS[name]))
                progress.advance(task)
    med = {n: {k: statistics.median(t[k] for t in runs[n]) for k in runs[n][0]} for n in names}
    result: dict[str, Any] = {
        "when": time.strftime("%Y-%m-%d %H:%M:%S %z"), "load_at_start": load, "rounds": args.rounds,
        "medians": med, "runs": runs,
        "ratio_first_task_auto_off": med["auto"]["first_task_s"] / med["off"]["first_task_s"],
        "ratio_first_task_aa": med["off_aa"]["first_task_s"] / med["off"]["first_task_s"],
    }
    print(f"first_task ({result['when']}, load {load:.2f} at start, {args.rounds} rounds)")
    for n in names:
        m = med[n]
        print(f"  {n:7} connect {m['connect_s']:.3f} s  first task {m['first_task_s']:.3f} s  "
              f"exit {m['exit_s']:.3f} s")
    print(f"  first task, auto / off: {result['ratio_first_task_auto_off']:.3f}  "
          f"(A/A off / off: {result['ratio_first_task_aa']:.3f})")
    Path(args.out).write_text(json.dumps(result, indent=2))
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
