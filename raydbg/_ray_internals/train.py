"""Ray Train V2's torch backend and state actor: the process-group setup, shutdown and
`report` raydbg wraps in a Train worker, and the live runs with their workers' ranks.

Written for Ray 2.51.x to 2.60.x (each name below read in 2.51.2, 2.55.1 and 2.60.0). Relies on: `ray.train.torch.config._setup_torch_process_group`
and `_shutdown_torch`, `ray.train.v2._internal.execution.train_fn_utils.
DistributedTrainFnUtils.report`, `ray.train.v2._internal.state.state_actor.get_state_actor`
and the TrainRun / TrainRunAttempt / TrainWorker fields its actor returns.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

# --- Ray Train V2 (torch backend) ---------------------------------------------------
# TorchConfig's backend runs `_setup_torch_process_group(backend, world_rank, world_size,
# init_method, timeout_s)` on every Train worker (worker_group.execute_single_async), and
# `_shutdown_torch(destroy_process_group)` when the run ends.
TORCH_CONFIG_MODULE = "ray.train.torch.config"
# DistributedTrainFnUtils.report is what `ray.train.report` (public) calls in a Train worker.
TRAIN_FN_UTILS_MODULE = "ray.train.v2._internal.execution.train_fn_utils"


def wrap_torch_pg_setup(module: Any, timeout_for: Callable[[int], int],
                        after: Callable[[dict[str, Any]], None]) -> bool:
    """Make Train's process-group setup use `timeout_for(user_timeout_s)`; `after(kwargs)` runs
    once the group exists. False when this Ray has no such function (nothing patched)."""
    original = getattr(module, "_setup_torch_process_group", None)
    if original is None or getattr(original, "_raydbg", False):
        return False

    # functools.wraps keeps __module__/__qualname__: cloudpickle still sends it by reference.
    @functools.wraps(original)
    def setup(*args: Any, **kwargs: Any) -> Any:
        names = ("backend", "world_rank", "world_size", "init_method", "timeout_s")
        kwargs.update(dict(zip(names, args, strict=False)))
        kwargs["timeout_s"] = timeout_for(int(kwargs.get("timeout_s", 1800)))
        out = original(**kwargs)
        after(kwargs)
        return out

    setup._raydbg = True  # type: ignore[attr-defined]
    module._setup_torch_process_group = setup
    return True


def wrap_torch_shutdown(module: Any, before: Callable[[], None]) -> bool:
    original = getattr(module, "_shutdown_torch", None)
    if original is None or getattr(original, "_raydbg", False):
        return False

    @functools.wraps(original)
    def shutdown(*args: Any, **kwargs: Any) -> Any:
        before()
        return original(*args, **kwargs)

    shutdown._raydbg = True  # type: ignore[attr-defined]
    module._shutdown_torch = shutdown
    return True


def wrap_train_report(module: Any, before: Callable[[], None]) -> bool:
    """Call `before()` at every `ray.train.report` of a Train worker."""
    cls = getattr(module, "DistributedTrainFnUtils", None)
    original = getattr(cls, "report", None)
    if cls is None or original is None or getattr(original, "_raydbg", False):
        return False

    @functools.wraps(original)
    def report(self: Any, *args: Any, **kwargs: Any) -> Any:
        before()
        return original(self, *args, **kwargs)

    report._raydbg = True  # type: ignore[attr-defined]
    cls.report = report
    return True


# --- Ray Train V2 state actor (stacks: which worker is which rank) ------------------
# ray.train.v2._internal.state.state_actor.get_state_actor() is the detached actor
# "train_v2_state_actor" (namespace "_train_state_actor") the Train controller reports
# to; get_train_runs() -> {run_id: TrainRun(id, name, job_id, status)},
# get_train_run_attempts() -> {run_id: {attempt_id: TrainRunAttempt(status, workers=[
# TrainWorker(world_rank, local_rank, node_id, pid, actor_id)])}} (pydantic models).
TRAIN_ACTIVE = frozenset({"INITIALIZING", "SCHEDULING", "RUNNING", "RESTARTING", "RESIZING"})


def train_runs(timeout: float = 5.0) -> list[dict[str, Any]]:
    """Live Ray Train V2 runs with their current attempt's workers; [] without Train or runs."""
    try:
        from ray.train.v2._internal.state.state_actor import get_state_actor
    except Exception:
        return []
    import ray

    actor = get_state_actor()
    if actor is None:
        return []
    runs: dict[str, Any]
    attempts: dict[str, Any]
    runs, attempts = ray.get([actor.get_train_runs.remote(), actor.get_train_run_attempts.remote()],
                             timeout=timeout)
    out = []
    for run_id, run in runs.items():
        status = getattr(run.status, "value", str(run.status))
        if status not in TRAIN_ACTIVE:
            continue
        latest = list((attempts.get(run_id) or {}).values())
        workers = latest[-1].workers if latest else []
        out.append({
            "run_id": run_id,
            "name": run.name,
            "job_id": run.job_id,
            "status": status,
            "world_size": len(workers),
            "workers": [
                {"world_rank": w.world_rank, "local_rank": w.local_rank, "node_id": w.node_id,
                 "pid": w.pid, "actor_id": w.actor_id}
                for w in workers
            ],
        })
    return out
