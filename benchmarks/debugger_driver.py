"""The debugger benchmark's driver subprocess: a Ray driver that runs commands read from stdin.

    python benchmarks/debugger_driver.py KIND    # started by benchmarks/debugger.py, one per driver

KIND is raydbg (RAY_DEBUG=1 and raydbg.runtime_env()), plain (plain Ray: RAYDBG_DISABLE=1),
or plainenv (plain Ray whose job has a runtime_env). It runs as `__main__`, so Ray pickles
the worker code below by value: the workers need not import anything of benchmarks/.
"""

from __future__ import annotations

import json
import logging
import os
import sys
import time
from typing import Any

from debugger_common import ENV_CONTROL, PROTO, cpu_seconds  # benchmarks/, this script's directory


# --- code that runs in Ray workers (pickled by value from the drivers' __main__) ----------
def noop() -> int:
    return os.getpid()


def fib(n: int) -> int:
    return n if n < 2 else fib(n - 1) + fib(n - 2)


class Probe:
    """One actor = one worker process, so a later call runs where the pause was."""

    def pid(self) -> int:
        return os.getpid()

    def pause(self) -> float:
        t0 = time.time()
        breakpoint()
        return t0

    def spin(self, loop: str, n: int, reps: int) -> dict[str, float]:
        """Run a CPU loop; its CPU time (this thread's) and wall time, in seconds."""
        c, t = time.thread_time(), time.perf_counter()
        for _ in range(reps):
            if loop == "calls":
                fib(n)
            else:
                total = 0
                for i in range(n):
                    total += i * i % 7
        return {"cpu": time.thread_time() - c, "wall": time.perf_counter() - t}

    def tracer(self) -> str:
        return repr(sys.gettrace())

    def debugger_state(self) -> dict[str, Any]:
        """Why raydbg's tracer would still be set here (a note when it is): its own flags."""
        import threading

        dbg = sys.modules.get("raydbg.worker.debugpy_control")
        if dbg is None:
            return {}
        return {"tracing": dbg._tracing, "client_attached": dbg.client_attached(),
                "paused_threads": len(dbg.paused_threads.current()), "threads": [t.name for t in threading.enumerate()]}


# --- driver subprocess: a Ray driver that runs commands read from stdin --------------------
def driver_main(kind: str) -> None:
    import ray

    runtime_env = None
    if kind == "raydbg":
        import raydbg

        runtime_env = raydbg.runtime_env()
    elif kind == ENV_CONTROL:  # plain Ray, but its job has a runtime_env, as raydbg's has
        runtime_env = {"env_vars": {"RAYDBG_BENCH_ENV_CONTROL": "1"}}
    ray.init(address=os.environ["RAY_ADDRESS"], runtime_env=runtime_env, logging_level=logging.ERROR,
             log_to_driver=False)
    remote_noop = ray.remote(noop)
    task_workers: set[int] = set()
    probe = ray.remote(num_cpus=0, max_restarts=0)(Probe)
    actors: dict[str, Any] = {}
    pending: dict[str, Any] = {}

    def reply(**msg: Any) -> None:
        sys.stdout.write(PROTO + json.dumps(msg) + "\n")
        sys.stdout.flush()

    def run(op: str, name: str = "", **kw: Any) -> Any:
        if op == "tasks":
            # Wall time, and CPU time (user + sys) of this driver and of the job's workers: the
            # CPU time per task hardly depends on what the neighbours do, wall time does.
            w0, d0, t = cpu_seconds(task_workers), time.process_time(), time.perf_counter()
            pids = ray.get([remote_noop.remote() for _ in range(kw["n"])], timeout=kw["timeout"])
            wall, d1, w1 = time.perf_counter() - t, time.process_time(), cpu_seconds(task_workers)
            known = set(pids) <= task_workers  # else a new worker's CPU time is missing
            task_workers.update(pids)
            return {"wall": wall, "driver_cpu": d1 - d0, "workers_cpu": (w1 - w0) if known else None}
        if op == "actor":  # one actor, one worker process
            actors[name] = probe.remote()
            return ray.get(actors[name].pid.remote(), timeout=kw["timeout"])
        if op == "pause":
            pending[name] = actors[name].pause.remote()
            return None
        if op == "join":
            return ray.get(pending.pop(name), timeout=kw["timeout"])
        if op == "spin":
            return ray.get(actors[name].spin.remote(kw["loop"], kw["n"], kw["reps"]), timeout=kw["timeout"])
        if op == "tracer":
            return ray.get(actors[name].tracer.remote(), timeout=kw["timeout"])
        if op == "debugger_state":
            return ray.get(actors[name].debugger_state.remote(), timeout=kw["timeout"])
        if op == "kill":
            pending.pop(name, None)
            handle = actors.pop(name, None)
            if handle is not None:
                ray.kill(handle, no_restart=True)
            return None
        raise ValueError(f"unknown op {op}")

    reply(ok=True, result=ray.get_runtime_context().get_job_id())
    for line in sys.stdin:
        cmd = json.loads(line)
        if cmd["op"] == "quit":
            break
        try:
            reply(ok=True, result=run(**cmd))
        except Exception as exc:  # reported to the parent, which fails the run with it
            reply(ok=False, error=f"{type(exc).__name__}: {exc}")
    ray.shutdown()


if __name__ == "__main__":
    driver_main(sys.argv[1])
