"""Benchmark: `raydbg list --json` from a shell with 100 paused sessions listed.

    .venv/bin/python benchmarks/list_sessions.py [--sessions 100] [--runs 10] [--out benchmarks/results/list_sessions.json]

One local cluster with the agents up (`raydbg up`). The sessions are planted: N valid
session records in the registry (GCS KV, where a pausing worker writes its own), on the
head node, for this process's pid (alive, so the agent's collector keeps them), state
`waiting`. What `raydbg list` does with them is what it does with N real pauses: one
gateway call, the gateway reads and checks every record, the CLI prints them. Each run
is a fresh Python process, as from a shell: `raydbg list --json` found through
RAY_ADDRESS (the head's gateway file), with the gateway named in RAYDBG_GATEWAY, and
the table (`raydbg list`);
the same with 0 sessions listed (what the N cost), and `python -c pass` (the interpreter's
own start, the floor); wall and CPU seconds of each, after one untimed run of each
(bytecode cached, as an installed raydbg has it). The kinds take turns within every run. The records are removed at
the end.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from common import REPO  # benchmarks/, this script's directory; the repository's root on sys.path

RESULTS = REPO / "benchmarks" / "results" / "list_sessions.json"


def plant(n: int, node_id: str, node_ip: str, job_id: str) -> list[str]:
    """N session records as pausing workers write them; their ids."""
    from raydbg import registry
    from raydbg.records import SessionRecord

    ids = []
    for i in range(n):
        rec = SessionRecord(id=f"bench{i:06x}", job_id=job_id, pid=os.getpid(), thread_id=1000 + i,
                            thread_name=f"Dummy-{i}", file=str(REPO / "examples" / "breakpoint_task.py"),
                            line=10 + i % 7, function="work", reason="breakpoint", node_id=node_id,
                            node_ip=node_ip, task_name=f"work_{i % 5}", since=time.time() - i, state="waiting")
        registry.put(registry.SESSION + rec.id, rec.to_dict())
        ids.append(rec.id)
    return ids


def timed(cmd: list[str], env: dict[str, str]) -> tuple[float, float, str]:
    """Wall seconds, CPU seconds (user + system: less moved by other load) and stdout."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t = time.perf_counter()
    out = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=120, cwd=REPO)
    took = time.perf_counter() - t
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    if out.returncode != 0:
        raise SystemExit(f"benchmarks/list_sessions.py: {' '.join(cmd[1:])} failed: {out.stderr.strip()[-300:]}")
    return took, cpu, out.stdout


def stats(xs: list[float]) -> dict[str, float]:
    return {"median": statistics.median(xs), "min": min(xs), "max": max(xs), "n": len(xs)}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--sessions", type=int, default=100)
    p.add_argument("--runs", type=int, default=10)
    p.add_argument("--out", type=Path, default=RESULTS)
    args = p.parse_args(argv)
    if args.sessions < 1 or args.runs < 1:
        raise SystemExit("benchmarks/list_sessions.py: --sessions and --runs must be at least 1")
    import ray

    from raydbg import registry
    from tests.cluster import ENV, Cluster

    load = os.getloadavg()
    times: dict[str, list[float]] = {}
    with Cluster(num_cpus=1, env=dict(ENV)) as cluster:
        gw = cluster.up()
        env = {**os.environ, "RAY_ADDRESS": cluster.address}
        env.pop("RAYDBG_GATEWAY", None)
        # As installed: bytecode cached (a shell with PYTHONDONTWRITEBYTECODE=1 would compile
        # every raydbg module on every run); a first untimed run of each kind writes it.
        env.pop("PYTHONDONTWRITEBYTECODE", None)
        named = {**env, "RAYDBG_GATEWAY": gw.address}
        raydbg_list = [sys.executable, "-m", "raydbg", "list", "--json"]
        kinds = {
            "python_start": ([sys.executable, "-c", "pass"], env),
            "list_ray_address": (raydbg_list, env),
            "list_gateway_named": (raydbg_list, named),
            "list_table": (raydbg_list[:-1], env),  # the table a user reads, RAY_ADDRESS
        }
        node_id = cluster.head_node_id()
        node_ip = ray.util.get_node_ip_address()
        job = ray.get_runtime_context().get_job_id()
        for cmd, kind_env in kinds.values():
            timed(cmd, kind_env)  # warm-up: bytecode written, files in the page cache
        for planted in (0, args.sessions):
            ids = plant(planted, node_id, node_ip, job)
            try:
                for r in range(args.runs):
                    names = list(kinds)
                    for name in names[r % len(names):] + names[:r % len(names)]:
                        cmd, kind_env = kinds[name]
                        took, cpu, out = timed(cmd, kind_env)
                        if name.startswith("list_ray_address") or name == "list_gateway_named":
                            listed = [s for s in json.loads(out) if str(s.get("id", "")).startswith("bench")]
                            assert len(listed) == planted, f"{len(listed)} of {planted} planted sessions listed"
                        times.setdefault(f"{name}_{planted}", []).append(took)
                        times.setdefault(f"{name}_{planted}_cpu", []).append(cpu)
            finally:
                for sid in ids:
                    registry.delete(registry.SESSION + sid)
    result: dict[str, Any] = {
        "when": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), "cores": os.cpu_count(),
        "load_before": load, "load_after": os.getloadavg(), "sessions": args.sessions, "runs": args.runs,
        "seconds": {k: stats(v) for k, v in times.items()}, "all": times,
    }
    print(f"raydbg list --json, {args.sessions} sessions planted, {args.runs} runs "
          f"(load {load[0]:.2f} before, {result['load_after'][0]:.2f} after); seconds, median / max:")
    for k, v in result["seconds"].items():
        print(f"  {k:28} {v['median']:.3f} / {v['max']:.3f}")
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2))
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
