"""Where a raydbg job's per-task cost lands in a busy worker: Ray's task-start hook and the
worker's whole main thread, raydbg's job (and variants with parts of it off) against plain Ray.

    python benchmarks/task_start_cost.py [--rounds N] [--batches N] [--tasks N] [--variants a,b]

Starts its own local Ray cluster (2 CPUs, a fresh temp dir; ray.shutdown() at the end) and
raydbg's agents (the memory monitor makes the pressure flag the start gate maps). Each
round runs one driver subprocess per kind, in turn (the order rotates), each submitting
`batches` x `tasks` no-op tasks. Every worker is instrumented by its setup hook (after
raydbg's, so it times raydbg's hooks with Ray's): the thread CPU time
(time.thread_time_ns) spent in `Worker.record_task_log_start`, and, between two tasks that
follow each other within 20 ms, the CPU time of the main thread and of the whole process.

Kinds: "plain" (RAYDBG_DISABLE=1), "control" (plain again: the A/A noise floor),
"raydbg" (RAY_DEBUG=1 and raydbg.runtime_env(), as a user runs it), and the variants:
"no-telemetry" (RAYDBG_TELEMETRY=0: Ray's tracing does not wrap task functions),
"no-gate" (RAYDBG_MEMORY_BUDGETS=0: no retry budgets, no start gate).
Figures: microseconds per task, and the difference to plain. A figure taken at load
average >= 1 is not a measurement of raydbg but of its neighbours: the run says so.
"""

from __future__ import annotations

import argparse
import glob
import json
import logging
import os
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
VARIANTS = {
    "plain": {"RAYDBG_DISABLE": "1"},
    "control": {"RAYDBG_DISABLE": "1"},
    "raydbg": {},
    "no-telemetry": {"RAYDBG_TELEMETRY": "0"},
    "no-gate": {"RAYDBG_MEMORY_BUDGETS": "0"},
}
PASSED_TO_WORKERS = ("RAYDBG_TELEMETRY", "RAYDBG_MEMORY_BUDGETS")


# --- in the workers (the setup hook is pickled by value from the driver's __main__) -------
def _instrument(out: str) -> None:
    import time

    import ray

    w = ray._private.worker.global_worker
    start = w.record_task_log_start
    thread_ns, process_ns = time.thread_time_ns, time.process_time_ns
    # hook ns, tasks, process ns, main thread ns, intervals counted
    st = [0, 0, 0, 0, 0]
    last = [0, 0]

    def timed_start(task_id: Any, attempt: int) -> None:
        t, p = thread_ns(), process_ns()
        if last[0] and p - last[0] < 20_000_000:  # back-to-back tasks only
            st[2] += p - last[0]
            st[3] += t - last[1]
            st[4] += 1
        last[0], last[1] = p, t
        start(task_id, attempt)
        st[0] += thread_ns() - t
        st[1] += 1
        if st[1] % 500 == 0:
            with open(f"{out}-{os.getpid()}.json", "w") as f:
                f.write(json.dumps(st))

    w.record_task_log_start = timed_start


def noop() -> int:
    return 0


def driver_main(kind: str, out: str, batches: int, tasks: int) -> None:
    import ray

    def hook_plain() -> None:
        _instrument(out)

    def hook_raydbg() -> None:
        from raydbg.activation import worker_setup_hook

        worker_setup_hook()
        _instrument(out)

    env: dict[str, Any] = {"worker_process_setup_hook": hook_plain}
    if kind not in ("plain", "control"):
        import raydbg

        passed = {k: v for k, v in os.environ.items() if k in PASSED_TO_WORKERS}
        env = {
            "worker_process_setup_hook": hook_raydbg,
            "env_vars": {**raydbg.runtime_env()["env_vars"], **passed},
        }
    ray.init(address=os.environ["RAY_ADDRESS"], runtime_env=env, logging_level=logging.ERROR,
             log_to_driver=False)  # fmt: skip
    f = ray.remote(noop)
    for _ in range(batches):
        ray.get([f.remote() for _ in range(tasks)])
    ray.shutdown()


# --- the parent ---------------------------------------------------------------------------
def totals(out_dir: Path, kind: str) -> dict[str, float]:
    tot = [0, 0, 0, 0, 0]
    for path in glob.glob(str(out_dir / f"{kind}-*.json")):
        tot = [a + b for a, b in zip(tot, json.loads(Path(path).read_text()), strict=True)]
    n, m = max(tot[1], 1), max(tot[4], 1)
    return {"tasks": tot[1], "hook_us": tot[0] / n / 1e3, "main_us": tot[3] / m / 1e3,
            "process_us": tot[2] / m / 1e3}  # fmt: skip


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=4)
    ap.add_argument("--batches", type=int, default=4, help="batches per driver and round")
    ap.add_argument("--tasks", type=int, default=2000, help="tasks per batch")
    ap.add_argument("--variants", default="raydbg,no-telemetry,no-gate",
                    help=f"besides plain and control; of {', '.join(list(VARIANTS)[2:])}")  # fmt: skip
    ap.add_argument("--out", type=Path, default=REPO / "benchmarks" / "results" / "task_start_cost.json")
    ap.add_argument("--driver", nargs=4, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.driver:
        kind, out, batches, tasks = args.driver
        driver_main(kind, out, int(batches), int(tasks))
        return 0
    unknown = set(args.variants.split(",")) - set(VARIANTS)
    if unknown:
        print(f"task_start_cost: unknown variant(s) {', '.join(sorted(unknown))}; "
              f"known: {', '.join(VARIANTS)}", file=sys.stderr)  # fmt: skip
        return 2
    kinds = ["plain", "control", *args.variants.split(",")]

    import ray
    from rich.console import Console
    from rich.progress import Progress
    from rich.table import Table

    load = os.getloadavg()[0]
    tmp = Path(tempfile.mkdtemp(prefix="raydbg-task-start-"))
    ctx: Any = ray.init(num_cpus=2, include_dashboard=False, _temp_dir=str(tmp / "ray"),
                        logging_level=logging.ERROR)  # fmt: skip
    try:
        from raydbg.agent_host import lifecycle

        lifecycle.up()
        base = dict(os.environ, RAY_ADDRESS=ctx.address_info["gcs_address"], RAY_DEBUG="1")
        base["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO), base.get("PYTHONPATH")]))
        with Progress(transient=True) as progress:
            bar = progress.add_task("rounds", total=args.rounds * len(kinds))
            for r in range(args.rounds):
                for kind in kinds[r % len(kinds):] + kinds[: r % len(kinds)]:
                    progress.update(bar, description=f"round {r + 1}: {kind}")
                    subprocess.run(
                        [sys.executable, __file__, "--driver", kind, str(tmp / kind),
                         str(args.batches), str(args.tasks)],
                        env=dict(base, **VARIANTS[kind]), check=True, cwd=tmp,
                    )  # fmt: skip
                    progress.advance(bar)
        results = {k: totals(tmp, k) for k in kinds}
    finally:
        ray.shutdown()
    plain = results["plain"]
    table = Table(title=f"CPU time per task in a busy worker, us (load at start {load:.2f})")
    for col in ("kind", "tasks", "Ray's start hook", "main thread", "whole process"):
        table.add_column(col, justify="left" if col == "kind" else "right")
    for k, r in results.items():
        cells = [f"{r[f]:.1f}" + ("" if k == "plain" else f" ({r[f] - plain[f]:+.1f})")
                 for f in ("hook_us", "main_us", "process_us")]  # fmt: skip
        table.add_row(k, str(r["tasks"]), *cells)
    Console().print(table)
    if load >= 1:
        print(f"load average {load:.2f} at the start (>= 1): not a measurement of raydbg alone")
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps({"load": load, "args": vars(args) | {"out": str(args.out)},
                                    "results": results}, indent=1))  # fmt: skip
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
