"""raydbg's memory monitor vs Ray's own, side by side, on the same sandboxed node and workload.

    .venv/bin/python benchmarks/memory_pressure.py            # full run (~10 min on 2 cores)
    .venv/bin/python benchmarks/memory_pressure.py --quick    # one scenario
    .venv/bin/python benchmarks/memory_pressure.py --cost     # only the monitor's own cost

Each run: a fresh child memory cgroup, bind-mounted on /sys/fs/cgroup/memory inside
a mount namespace so Ray's monitor sees the limit as in a container, a single-node
Ray cluster in it, a non-restartable actor holding memory and growing tasks (one of
them a `max_retries=0` call of the same function). Configurations: kernel OOM killer
only, Ray's monitor (defaults), raydbg (Ray's off), both. Needs root (cgroup + mount).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "examples"))
import memory_workload as mp  # noqa: E402

MODES = ["kernel", "ray", "raydbg", "both"]
SCENARIOS = {
    # limit: ~0.6 GiB Ray + actor + two tasks fit under raydbg's 0.9 threshold, three do not.
    "slow": mp.Scenario(limit_mb=3400, tasks=3, peak_mb=900, rate_mb_s=150, zero_retry=[1]),
    "fast": mp.Scenario(limit_mb=3400, tasks=3, peak_mb=900, rate_mb_s=1000, zero_retry=[1]),
    # Six at once (num_cpus=6), two of them max_retries=0 calls of the same function.
    "many": mp.Scenario(
        limit_mb=3400,
        tasks=6,
        peak_mb=600,
        rate_mb_s=300,
        stagger_s=0.3,
        zero_retry=[1, 4],
        num_cpus=6,
    ),
    # Three waves of 'many' (18 tasks, 6 CPUs): what the node learns in the first wave
    # (how much a `grow` task needs) can spare the later ones.
    "waves": mp.Scenario(
        limit_mb=3400,
        tasks=18,
        peak_mb=600,
        rate_mb_s=300,
        stagger_s=0.3,
        zero_retry=[1, 7, 13],
        num_cpus=6,
    ),
}


def row(scenario: str, r: dict[str, Any]) -> dict[str, Any]:
    res = r.get("results", [])
    failed: dict[str, int] = {}
    for x in res:
        if x["status"] != "ok":
            failed[x["status"]] = failed.get(x["status"], 0) + 1
    reactions = [e["details"]["reaction_s"] for e in r.get("events", [])]
    return {
        "scenario": scenario,
        "mode": r["mode"],
        "ok": sum(1 for x in res if x["status"] == "ok"),
        "tasks": len(res),
        "failed": failed,
        "nonretriable_lost": sum(1 for x in res if x["zero"] and x["status"] != "ok")
        + (0 if r.get("actor_alive") else 1),
        "actor_alive": r.get("actor_alive"),
        "kernel_oom": r.get("kernel_oom_kills"),
        "ray_kills": r.get("ray_kills"),
        "raydbg_kills": r.get("raydbg_kills"),
        "retries": sum(x.get("attempt", 0) for x in res if x["status"] == "ok"),
        "raylet_gcs_alive": bool(r.get("raylet_alive") and r.get("gcs_alive")),
        "wall_s": r.get("wall_s"),
        "base_mb": r.get("base_mb"),
        "peak_mb": r.get("peak_mb"),
        "reaction_ms": round(1000 * statistics.median(reactions)) if reactions else None,
        "error": None if res else (r.get("driver_tail") or "")[-300:],
        # Who raydbg killed, for the record: kind, name, retriable, retries left, attempt.
        "victims": [
            {
                k: e["details"]["victim"].get(k)
                for k in ("kind", "name", "retriable", "retries_left", "attempt")
            }
            for e in sorted(r.get("events", []), key=lambda e: e["ts"])
        ],
    }


def aggregate(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """One line per (scenario, config) over the repeats: sums, medians, worst cases."""
    groups: dict[tuple[str, str], list[dict[str, Any]]] = {}
    for x in rows:
        groups.setdefault((x["scenario"], x["mode"]), []).append(x)
    out = []
    for (scenario, mode), xs in groups.items():
        failed: dict[str, int] = {}
        for x in xs:
            for k, v in x["failed"].items():
                failed[k] = failed.get(k, 0) + v
        walls = [x["wall_s"] for x in xs if x["wall_s"] is not None]
        reacts = [x["reaction_ms"] for x in xs if x["reaction_ms"] is not None]
        out.append(
            {
                "scenario": scenario,
                "mode": mode,
                "runs": len(xs),
                "ok": sum(x["ok"] for x in xs),
                "tasks": sum(x["tasks"] for x in xs),
                "failed": failed,
                "nonretriable_lost": sum(x["nonretriable_lost"] for x in xs),
                "kernel_oom": sum(x["kernel_oom"] or 0 for x in xs),
                "ray_kills": sum(x["ray_kills"] or 0 for x in xs),
                "raydbg_kills": sum(x["raydbg_kills"] or 0 for x in xs),
                "raylet_gcs_alive": all(x["raylet_gcs_alive"] for x in xs),
                "wall_s": round(statistics.median(walls), 1) if walls else None,
                "peak_mb": max(x["peak_mb"] or 0 for x in xs),
                "reaction_ms": round(statistics.median(reacts)) if reacts else None,
            }
        )
    return out


def table(rows: list[dict[str, Any]]) -> str:
    head = (
        "| scenario | config | runs | completed | failed (type) | non-retriable lost "
        "| kernel OOM kills | Ray kills | raydbg kills | raylet+GCS alive | wall s (median) "
        "| peak MiB | reaction ms |"
    )
    lines = [head, "|" + "---|" * 13]
    for x in aggregate(rows):
        failed = ", ".join(f"{k} {v}" for k, v in x["failed"].items()) or "-"
        lines.append(
            f"| {x['scenario']} | {x['mode']} | {x['runs']} | {x['ok']}/{x['tasks']} | {failed} "
            f"| {x['nonretriable_lost']} | {x['kernel_oom']} | {x['ray_kills']} "
            f"| {x['raydbg_kills']} | {'yes' if x['raylet_gcs_alive'] else 'NO'} "
            f"| {x['wall_s']} | {x['peak_mb']} | {x['reaction_ms'] if x['reaction_ms'] is not None else '-'} |"
        )
    return "\n".join(lines)


# ---- the monitor's own cost ---------------------------------------------------------------


def cost(workers: int = 50) -> dict[str, Any]:
    """CPU and wall time per refresh with `workers` Ray worker processes on the node."""
    import ray

    from raydbg.memory.monitor import MemoryMonitor, MonitorConfig
    from raydbg.memory.node_memory import NodeMeasurer
    from raydbg.memory.policy import PolicyConfig
    from raydbg.memory.worker_tasks import GcsView, Resolver

    ray.init(num_cpus=2, include_dashboard=False, logging_level="ERROR")
    try:

        @ray.remote(num_cpus=0)
        class Idle:
            def pid(self) -> int:
                return os.getpid()

        actors = [Idle.remote() for _ in range(workers)]
        pids = set(ray.get([a.pid.remote() for a in actors], timeout=600))
        node_id = ray.get_runtime_context().get_node_id()
        measurer = NodeMeasurer()
        resolver = Resolver(GcsView(), node_id, protect={os.getpid()})

        def per_call(fn: Any, n: int) -> tuple[float, float]:
            c0, w0 = time.process_time(), time.perf_counter()
            for _ in range(n):
                fn()
            return (time.process_time() - c0) / n * 1e3, (time.perf_counter() - w0) / n * 1e3

        far = MemoryMonitor(resolver, measurer=measurer, config=MonitorConfig(mode="dry-run"))
        cheap = per_call(far.poll, 200)
        # Warm band and a decision round, forced by a threshold the node is already above.
        hot_cfg = MonitorConfig(mode="dry-run", policy=PolicyConfig(threshold=0.0001))
        hot = MemoryMonitor(
            resolver, measurer=measurer, config=hot_cfg, record_event=lambda e: None
        )
        hot.config = MonitorConfig(mode="dry-run", policy=hot_cfg.policy, dry_run_cooldown_s=0)
        scan = per_call(lambda: hot._scan(time.monotonic()), 20)
        decide = per_call(lambda: (setattr(hot, "_dry_until", -1.0), hot.poll()), 20)
        seen = sum(1 for c in resolver.candidates(hot.procs, {}) if c.pid in pids)
        return {
            "workers": workers,
            "workers_seen_as_candidates": seen,
            "node_processes": len(hot.procs),
            "cheap_poll_ms": {"cpu": round(cheap[0], 3), "wall": round(cheap[1], 3)},
            "scan_ms": {"cpu": round(scan[0], 2), "wall": round(scan[1], 2)},
            "decision_round_ms": {"cpu": round(decide[0], 2), "wall": round(decide[1], 2)},
        }
    finally:
        ray.shutdown()


def best_schedule(sc: Any, base_mb: float) -> dict[str, float]:
    """The limit any monitor works against: how many of the scenario's tasks fit at once
    under the threshold beside what the node holds before they start (`base_mb`,
    measured by the driver), and the wall time of running them in such packs (each task
    grows for peak/rate s, then holds; submissions are `stagger_s` apart)."""
    room = sc.threshold * sc.limit_mb - base_mb
    fit = max(1, min(sc.num_cpus, int(room // sc.peak_mb)))
    each = sc.peak_mb / sc.rate_mb_s + sc.hold_s
    packs = -(-sc.tasks // fit)
    # The last task cannot start before it is submitted.
    wall = max(packs * each, (sc.tasks - 1) * sc.stagger_s + each)
    return {"fit": fit, "wall_s": round(wall, 1), "base_mb": round(base_mb)}


def best_table(rows: list[dict[str, Any]]) -> str:
    """Per scenario: raydbg's median wall against the best schedule's."""
    import statistics

    lines = [
        "| scenario | base MiB (median) | tasks that fit at once | best-schedule wall s |"
        " raydbg wall s (median) | gap |",
        "|---|---|---|---|---|---|",
    ]
    for name, sc in SCENARIOS.items():
        mine = [r for r in rows if r["scenario"] == name and r.get("base_mb")]
        if not mine:
            continue
        best = best_schedule(sc, statistics.median(r["base_mb"] for r in mine))
        ours = [r["wall_s"] for r in mine if r["mode"] == "raydbg" and r.get("wall_s")]
        wall = statistics.median(ours) if ours else float("nan")
        lines.append(
            f"| {name} | {best['base_mb']} | {best['fit']} | {best['wall_s']} | {wall:.1f} |"
            f" {wall / best['wall_s']:.2f}x |"
        )
    return "\n".join(lines)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--quick", action="store_true", help="the 'fast' scenario only")
    p.add_argument("--cost", action="store_true", help="only the monitor's own cost")
    p.add_argument("--modes", default=",".join(MODES))
    p.add_argument("--scenarios", default=",".join(SCENARIOS), help="comma list of scenarios")
    p.add_argument("--repeat", type=int, default=1, help="runs per configuration")
    p.add_argument("--out", default="benchmarks/results/memory_pressure.json")
    args = p.parse_args()
    out: dict[str, Any] = {"when": time.strftime("%Y-%m-%d %H:%M"), "cpus": os.cpu_count()}
    if not args.cost:
        rows = []
        names = ["fast"] if args.quick else args.scenarios.split(",")
        for _ in range(args.repeat):
            for name in names:
                for mode in args.modes.split(","):  # interleaved: load drifts hit all alike
                    r = mp.run(mode, SCENARIOS[name], bind_mount=True, timeout=300)
                    rows.append(row(name, r))
                    print(json.dumps(rows[-1]), flush=True)
        out["rows"] = rows
        print()
        print(table(rows))
        print()
        print(best_table(rows))
    out["cost"] = cost()
    print()
    print("monitor cost:", json.dumps(out["cost"]))
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(out, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
