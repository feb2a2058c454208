"""Code that pauses inside Ray workers; each pause line carries a `# BP:<name>` marker."""

from __future__ import annotations

import asyncio
import os
import threading
import time
from pathlib import Path

import ray
from bp_markers import marker_line


def line_of(marker: str) -> int:
    return marker_line(__file__, marker)


FILE = str(Path(__file__).resolve())


def plain_task(x: int) -> int:
    local_value = x * 3
    breakpoint()  # BP:task
    return local_value + 1


def two_breakpoints(x: int) -> int:
    first = x + 1
    breakpoint()  # BP:first
    second = first * 2
    breakpoint()  # BP:second
    return second


def failing_task(x: int) -> int:
    doomed = x - 1
    raise ValueError(f"bad input {doomed}")  # BP:raise_task


def failing_in_a_library(text: str) -> object:
    import json

    return json.loads(text)  # BP:raise_in_library


class Counter:
    def __init__(self) -> None:
        self.total = 10

    def add(self, n: int) -> int:
        local_value = self.total + n
        breakpoint()  # BP:actor
        self.total = local_value
        return self.total

    def fail(self, n: int) -> int:
        doomed = n * 2
        raise KeyError(f"missing {doomed}")  # BP:raise_actor


class ThreadedActor:
    def __init__(self) -> None:
        self.lock = threading.Lock()

    def work(self, n: int) -> int:
        local_value = n + 100
        breakpoint()  # BP:threaded
        return local_value

    def pid(self) -> int:
        return os.getpid()


class AsyncActor:
    async def work(self, n: int) -> int:
        await asyncio.sleep(0)
        local_value = n + 7
        breakpoint()  # BP:async
        return local_value


def data_fn(batch: dict) -> dict:
    local_value = len(batch["id"])
    if int(batch["id"][0]) == 0:
        breakpoint()  # BP:data_fn
    batch["id"] = batch["id"] * 2 + 0 * local_value
    return batch


class DataCls:
    def __init__(self) -> None:
        self.factor = 3

    def __call__(self, batch: dict) -> dict:
        local_value = self.factor
        if int(batch["id"][0]) == 0:
            breakpoint()  # BP:data_cls
        batch["id"] = batch["id"] * local_value
        return batch


def train_loop(config: dict) -> None:
    import ray.train

    rank = ray.train.get_context().get_world_rank()
    local_value = 1000 + rank
    if rank == 0:
        breakpoint()  # BP:train
    ray.train.report({"rank_value": local_value})


def setup_hook_marker() -> None:
    import os

    os.environ["USER_HOOK_RAN"] = "yes"


def user_hook_ran() -> str:
    import os

    return os.environ.get("USER_HOOK_RAN", "no")


def worker_view() -> dict:
    """What a task sees of raydbg: who owns breakpoint(), a carried setting, and whether a
    process it starts inherits the setup-hook variable raydbg's .pth set for Ray."""
    import os
    import subprocess
    import sys

    child = subprocess.run(
        [sys.executable, "-c", "import os; print(os.environ.get('__RAY_WORKER_PROCESS_SETUP_HOOK_ENV_VAR', ''))"],
        capture_output=True, text=True, timeout=60,
    ).stdout.strip()
    return {"breakpointhook": getattr(sys.breakpointhook, "__module__", ""),
            "wait_timeout": os.environ.get("RAYDBG_WAIT_TIMEOUT"), "child_hook_var": child}


def cpu_loop(n: int) -> float:
    import time

    start = time.perf_counter()
    total = 0
    for i in range(n):
        total += i % 7
    return time.perf_counter() - start


def user_runtime_env_hook(runtime_env: dict | None) -> dict:
    """A user's own RAY_RUNTIME_ENV_HOOK: raydbg must chain it, not replace it."""
    env = dict(runtime_env or {})
    env_vars = dict(env.get("env_vars") or {})
    env_vars["USER_ENV_HOOK"] = "ran"
    env["env_vars"] = env_vars
    return env


def user_env_hook_ran() -> str:
    import os

    return os.environ.get("USER_ENV_HOOK", "no")


import sys as _sys  # noqa: E402

# Workers cannot import tests/: ship this module's code by value.
ray.cloudpickle.register_pickle_by_value(_sys.modules[__name__])


def nap(seconds: float) -> int:
    time.sleep(seconds)
    return os.getpid()


def nap_batch(batch: dict) -> dict:
    time.sleep(float(os.environ.get("NAP_BATCH_S", "6")))
    return batch
