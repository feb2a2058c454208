"""Memory pressure on a small sandboxed Ray node: who gets killed, by whom, and what survives.

    python examples/memory_workload.py                # raydbg's monitor, default scenario
    python examples/memory_workload.py --mode ray     # Ray's own monitor instead

A child memory cgroup (needs root or a delegated cgroup) is the node; a
single-node Ray cluster runs inside it: a non-restartable actor holds memory while
retriable tasks grow past the limit (some of them `max_retries=0` calls of the same
function). Modes: `kernel` (no monitor), `ray` (Ray's), `raydbg` (ours, spawned by the
driver), `both` (Ray's and ours), `agent` (ours as the product runs it: the driver starts the
head node's raydbg agent, which spawns the monitor and, as the gateway, records the job's
history under RAYDBG_HISTORY; the driver waits until the record holds every kill).
`run()` is reused by tests/e2e/test_memory_e2e.py and benchmarks/memory_pressure.py.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from dataclasses import asdict, dataclass, field
from typing import Any

MiB = 1 << 20


@dataclass
class Scenario:
    limit_mb: int = 2600
    tasks: int = 3
    peak_mb: int = 700
    rate_mb_s: float = 250.0
    hold_s: float = 1.0
    stagger_s: float = 0.6
    zero_retry: list[int] = field(default_factory=list)  # indices submitted with max_retries=0
    actor_mb: int = 300
    num_cpus: int = 4
    threshold: float = 0.9  # raydbg's


# ---- inside the cgroup: the driver -----------------------------------------------------


def _touch(n: int) -> bytearray:
    b = bytearray(n)
    b[::4096] = b"\x01" * len(range(0, n, 4096))  # fault every page in: charged to the cgroup
    return b


RAYDBG_MODES = ("raydbg", "both", "agent")  # raydbg's monitor runs


def driver(sc: Scenario, mode: str) -> dict[str, Any]:
    if mode in ("kernel", "raydbg", "agent"):
        os.environ["RAY_memory_monitor_refresh_ms"] = "0"  # Ray's monitor off
    import ray

    env_vars = {
        "RAYDBG_MEMORY_THRESHOLD": str(sc.threshold),
        "RAYDBG_MEMORY_MONITOR": "on",
    }
    runtime_env: dict[str, Any] = {"env_vars": env_vars}
    if mode in RAYDBG_MODES:
        from raydbg.memory import start_gate

        os.environ.update(env_vars)
        start_gate.driver_setup()
        runtime_env["worker_process_setup_hook"] = "raydbg.memory.start_gate.worker_setup"
    ray.init(
        address="local",  # always its own cluster: a plain ray.init() joins a `ray start` one here
        num_cpus=sc.num_cpus,
        include_dashboard=False,
        object_store_memory=80 * MiB,
        runtime_env=runtime_env,
        logging_level="ERROR",
    )
    ctx = ray.get_runtime_context()
    node_id, gcs, job_id = ctx.get_node_id(), ctx.gcs_address, ctx.get_job_id()
    service = None
    agent: dict[str, Any] = {}
    if mode in ("raydbg", "both"):
        from raydbg.memory import service as svc

        service = svc.spawn(
            gcs, node_id, env=env_vars, log_path=os.environ.get("RAYDBG_MONITOR_LOG")
        )
    elif mode == "agent":
        agent = _start_agent(node_id)

    @ray.remote(max_restarts=0, num_cpus=0)
    class Holder:
        def __init__(self, mb: int) -> None:
            self.blob = _touch(mb * MiB)

        def ping(self) -> int:
            return os.getpid()

    @ray.remote
    def grow(i: int, peak_mb: int, rate: float, hold_s: float) -> dict[str, Any]:
        start = time.time()
        attempt = int(
            ray._private.worker.global_worker.core_worker.get_current_task_attempt_number()
        )
        chunks, step = [], 32
        for _ in range(peak_mb // step):
            chunks.append(_touch(step * MiB))
            time.sleep(step / rate)
        time.sleep(hold_s)
        tid = ray.get_runtime_context().get_task_id()
        return {"i": i, "attempt": attempt, "start": start, "end": time.time(), "task_id": tid}

    holder = Holder.remote(sc.actor_mb)
    ray.get(holder.ping.remote(), timeout=60)
    time.sleep(1.0)  # the monitor is up, the node is calm
    base_mb = _node_used_mb()  # Ray, the actor and idle workers: what the tasks share the node with
    if agent:
        agent["anon_mb_at_start"] = _anon_mb(agent["pid"])
    t0 = time.time()
    refs = []
    for i in range(sc.tasks):
        retries = 0 if i in sc.zero_retry else 3
        refs.append(
            grow.options(max_retries=retries).remote(i, sc.peak_mb, sc.rate_mb_s, sc.hold_s)
        )
        time.sleep(sc.stagger_s)
    results: list[dict[str, Any]] = []
    for i, ref in enumerate(refs):
        try:
            r = ray.get(ref, timeout=300)
            results.append(
                {
                    "i": i,
                    "status": "ok",
                    "attempt": r["attempt"],
                    "task_id": r["task_id"],
                    "zero": i in sc.zero_retry,
                    "start": round(r["start"] - t0, 2),
                    "end": round(r["end"] - t0, 2),
                }
            )
        except Exception as e:
            results.append({"i": i, "status": type(e).__name__, "zero": i in sc.zero_retry})
    wall = time.time() - t0
    try:
        ray.get(holder.ping.remote(), timeout=20)
        actor_alive = True
    except Exception:
        actor_alive = False
    events: list[dict[str, Any]] = []
    stats: dict[str, Any] = {}
    if mode in RAYDBG_MODES:
        from raydbg import registry

        time.sleep(0.3)
        events = [e for e in registry.events(200) if e.get("kind") == "memory.kill"]
        stats = registry.get("memory/" + node_id) or {}
    if service is not None:
        service.terminate()
        service.wait(10)
    if agent:
        agent["anon_mb_at_end"] = _anon_mb(agent["pid"])
        agent["record"] = _wait_for_record(job_id, [e["id"] for e in events])
    ray_kills = _ray_kill_count()
    alive = _system_alive()
    ray.shutdown()
    return {
        "mode": mode,
        "wall_s": round(wall, 2),
        "base_mb": base_mb,
        "results": results,
        "actor_alive": actor_alive,
        "raydbg_kills": len(events),
        "ray_kills": ray_kills,
        "events": events,
        "monitor": stats,
        "job_id": job_id,
        "agent": agent,
        **alive,
    }


def _start_agent(node_id: str, timeout: float = 60.0) -> dict[str, Any]:
    """The head node's raydbg agent, as an activated driver starts it; back once its memory
    monitor runs. Its pid and how long the start took."""
    import ray

    from raydbg import registry
    from raydbg.agent_host import lifecycle

    t0 = time.monotonic()
    handle = lifecycle.ensure_agent(node_id, True, lifecycle.who("examples/memory_workload.py"))
    ray.get(handle.ping.remote(), timeout=timeout)
    rec: dict[str, Any] = {}
    while time.monotonic() - t0 < timeout:
        rec = registry.get(registry.AGENT + node_id) or {}
        if (rec.get("memory_monitor") or {}).get("state") == "running":
            break
        time.sleep(0.1)
    else:
        raise RuntimeError(f"the agent's memory monitor is not running: {rec.get('memory_monitor')}")
    return {"pid": rec["pid"], "start_s": round(time.monotonic() - t0, 2)}


def _anon_mb(pid: int) -> float | None:
    """A process's anonymous memory (what the cgroup holds against the node), MiB."""
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("RssAnon:"):
                    return round(int(line.split()[1]) / 1024, 1)
    except OSError:
        pass
    return None


def _wait_for_record(job_id: str, event_ids: list[str], timeout: float = 20.0) -> dict[str, Any]:
    """Wait (bounded) until the job's history record (RAYDBG_HISTORY, written by the gateway
    every few seconds) holds every event in `event_ids`: the cluster goes down next, and the
    recorder's last round with it. What is still missing when the time is up is said."""
    from raydbg.history import reader, store

    t0 = time.monotonic()
    place = store.open_store()
    missing = set(event_ids)
    record = ""
    while True:
        try:
            record = reader.resolve(place, job_id)
            got = reader.load(place, record)["entries"]
            missing = set(event_ids) - {e["data"].get("id") for e in got if e["kind"] == "event"}
        except OSError:
            pass  # no record yet
        if (record and not missing) or time.monotonic() - t0 > timeout:
            break
        time.sleep(0.25)
    return {"where": place.where, "record": record, "missing": sorted(missing),
            "waited_s": round(time.monotonic() - t0, 2)}


def _node_used_mb() -> int:
    from raydbg.memory.node_memory import NodeMeasurer

    return NodeMeasurer(psi=False).read().used // MiB


def _session_logs() -> str:
    import ray

    return os.path.join(ray._private.worker._global_node.get_session_dir_path(), "logs")


def _ray_kill_count() -> int:
    """Ray's own monitor logs each round in raylet.out: "Killing N worker(s), kill details: ..."."""
    import re

    n = 0
    try:
        with open(os.path.join(_session_logs(), "raylet.out"), errors="replace") as f:
            for line in f:
                m = re.search(r"Killing (\d+) worker\(s\), kill details", line)
                if m:
                    n += int(m.group(1))
    except OSError:
        pass
    return n


def _system_alive() -> dict[str, bool]:
    import ray

    node = ray._private.worker._global_node
    procs = node.all_processes if node is not None else {}
    out = {}
    for key, label in (("raylet", "raylet_alive"), ("gcs_server", "gcs_alive")):
        infos = procs.get(key) or []
        out[label] = bool(infos) and all(i.process.poll() is None for i in infos)
    return out


# ---- outside: the sandbox ---------------------------------------------------------------


def run(
    mode: str,
    sc: Scenario | None = None,
    bind_mount: bool = False,
    timeout: float = 240.0,
    monitor_log: str | None = None,
    history: str | None = None,
) -> dict[str, Any]:
    """Run one configuration in a fresh child cgroup; returns the driver's report plus OOM kills.

    bind_mount: run in a mount namespace with the child cgroup bind-mounted on
    /sys/fs/cgroup/memory, so Ray's monitor (which reads only the root paths) sees the
    limit as it would in a container.
    history: RAYDBG_HISTORY of the cluster (where mode `agent`'s gateway records the job).
    """
    from cgroup_sandbox import ChildCgroup

    sc = sc or Scenario()
    cmd = [
        sys.executable,
        os.path.abspath(__file__),
        "--driver",
        json.dumps(asdict(sc)),
        "--mode",
        mode,
    ]
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    if monitor_log:
        env["RAYDBG_MONITOR_LOG"] = monitor_log
    if history:
        env["RAYDBG_HISTORY"] = history
    with ChildCgroup(sc.limit_mb * MiB) as cg:
        if bind_mount:
            inner = " ".join(f"'{c}'" for c in cmd)
            cmd = [
                "unshare",
                "-m",
                "sh",
                "-c",
                f"mount --bind {cg.path} /sys/fs/cgroup/memory && exec {inner}",
            ]
        p = cg.popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env)
        try:
            out, _ = p.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            p.kill()
            out, _ = p.communicate()
        report: dict[str, Any] = {"mode": mode, "driver_rc": p.returncode}
        for line in out.splitlines():
            if line.startswith("RESULT "):
                report.update(json.loads(line[7:]))
        if "results" not in report:
            report["driver_tail"] = out[-3000:]
        report["raydbg_lines"] = [ln for ln in out.splitlines() if "raydbg:" in ln][-20:]
        report["kernel_oom_kills"] = cg.oom_kills()
        report["peak_mb"] = (cg.max_usage() or 0) // MiB
    return report


def summary(r: dict[str, Any]) -> str:
    res = r.get("results", [])
    ok = sum(1 for x in res if x["status"] == "ok")
    failed: dict[str, int] = {}
    for x in res:
        if x["status"] != "ok":
            failed[x["status"]] = failed.get(x["status"], 0) + 1
    lost0 = sum(1 for x in res if x["zero"] and x["status"] != "ok")
    return (
        f"{r['mode']:7} ok {ok}/{len(res)} failed {failed or '-'} non-retriable lost {lost0} "
        f"kernel OOM {r.get('kernel_oom_kills')} ray kills {r.get('ray_kills')} "
        f"raydbg kills {r.get('raydbg_kills')} actor alive {r.get('actor_alive')} "
        f"wall {r.get('wall_s')}s"
    )


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--mode", default="raydbg", choices=["kernel", "ray", "raydbg", "both", "agent"])
    p.add_argument("--driver", help=argparse.SUPPRESS)
    p.add_argument("--json", action="store_true")
    args = p.parse_args()
    if args.driver:
        print(
            "RESULT " + json.dumps(driver(Scenario(**json.loads(args.driver)), args.mode)),
            flush=True,
        )
        return 0
    r = run(args.mode, Scenario(zero_retry=[1]))
    if args.json:
        print(json.dumps(r, indent=2))
    else:
        print(summary(r))
        for e in r.get("events", []):
            print("  event:", e["message"])
    return 0


if __name__ == "__main__":
    sys.exit(main())
