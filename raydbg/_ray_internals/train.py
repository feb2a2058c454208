"""Ray Train V2's torch backend and state actor: the process-group setup, shutdown and
`report` raydbg wraps in a Train worker, and the live runs with their workers' ranks.

Written for Ray 2.51.x to 2.60.x (each name below read in 2.51.2, 2.55.1 and 2.60.0). Relies on: `ray.train.torch.config._setup_torch_process_group`
and `_shutdown_torch`, `ray.train.v2._internal.execution.train_fn_utils.
DistributedTrainFnUtils.report`, `ray.train.v2._internal.state.state_actor.get_state_actor`
and the TrainRun / TrainRunAttempt / TrainWorker fields its actor returns (a run's
`run_settings.run_config.storage_path` read where present: 2.60).
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


def wrap_train_report(module: Any, before: Callable[[], None], after: Callable[[], None]) -> bool:
    """Call `before()` at every `ray.train.report` of a Train worker, `after()` once it returned
    (it waits for every rank: the time in between is the rank's wait for the slowest)."""
    cls = getattr(module, "DistributedTrainFnUtils", None)
    original = getattr(cls, "report", None)
    if cls is None or original is None or getattr(original, "_raydbg", False):
        return False

    @functools.wraps(original)
    def report(self: Any, *args: Any, **kwargs: Any) -> Any:
        before()
        try:
            return original(self, *args, **kwargs)
        finally:
            after()

    report._raydbg = True  # type: ignore[attr-defined]
    cls.report = report
    return True


# --- Ray Train V2 state actor (stacks: which worker is which rank; every attempt) ---
# ray.train.v2._internal.state.state_actor.get_state_actor() is the detached actor
# "train_v2_state_actor" (namespace "_train_state_actor") the Train controller reports
# to, only when the driver has RAY_TRAIN_ENABLE_STATE_TRACKING=1 (off by default in 2.60);
# get_train_runs() -> {run_id: TrainRun(id, name, job_id, status, status_detail,
# start_time_ns, end_time_ns)}, get_train_run_attempts() -> {run_id: {attempt_id:
# TrainRunAttempt(status, status_detail, start_time_ns, end_time_ns, workers=[TrainWorker(
# world_rank, local_rank, node_id, node_ip, pid, actor_id, status)])}} (pydantic models,
# attempts in creation order). A failed attempt is ERRORED with status_detail
# "[Rank 1 Error Snippet]:\n<traceback>" (WorkerGroupPollStatus.get_error_string); its
# workers are all marked DEAD at the end, so the failed ranks are only in that text.
TRAIN_ACTIVE = frozenset({"INITIALIZING", "SCHEDULING", "RUNNING", "RESTARTING", "RESIZING"})


def _value(obj: Any, name: str) -> Any:
    """A field when this Ray has it (None otherwise); an enum as its value."""
    v = getattr(obj, name, None)
    return getattr(v, "value", v)


def _worker_record(w: Any) -> dict[str, Any]:
    return {k: _value(w, k) for k in ("world_rank", "local_rank", "node_id", "node_ip", "pid", "actor_id",
                                      "status")}


def _attempt_record(a: Any) -> dict[str, Any]:
    out = {k: _value(a, k) for k in ("attempt_id", "status", "status_detail", "start_time_ns", "end_time_ns")}
    out["workers"] = [_worker_record(w) for w in getattr(a, "workers", None) or []]
    return out


def train_run_records(run: str | None = None, timeout: float = 5.0) -> list[dict[str, Any]]:
    """Every Ray Train V2 run the state actor knows (or those whose name or id is `run`), each with
    every attempt, oldest first, as plain dicts; [] without Train or its state actor. One call.

    The dicts are made inside the state actor (`__ray_call__`): a run's settings hold its backend
    config, and unpickling a TorchConfig here would import torch into the caller (the gateway:
    +250 MiB and a second of CPU). Where that call fails, the objects are read here."""
    try:
        from ray.train.v2._internal.state.state_actor import get_state_actor
    except Exception:
        return []
    import ray

    actor = get_state_actor()
    if actor is None:
        return []
    try:
        return list(ray.get(actor.__ray_call__.remote(_records_in_state_actor, run), timeout=timeout))
    except (AttributeError, ray.exceptions.RayTaskError):  # an older Ray, or raydbg not importable there
        runs: dict[str, Any]
        attempts: dict[str, Any]
        runs, attempts = ray.get([actor.get_train_runs.remote(), actor.get_train_run_attempts.remote()],
                                 timeout=timeout)
        return _records(runs, attempts, run)


def _records_in_state_actor(state: Any, run: str | None) -> list[dict[str, Any]]:
    """Runs in Train's state actor (it holds the runs' objects): only plain dicts cross."""
    return _records(state.get_train_runs(), state.get_train_run_attempts(), run)


def _records(runs: dict[str, Any], attempts: dict[str, Any], run: str | None) -> list[dict[str, Any]]:
    out = []
    for run_id, r in runs.items():
        if run is not None and run not in (run_id, r.name):
            continue
        rec = {k: _value(r, k) for k in ("name", "job_id", "status", "status_detail", "start_time_ns",
                                         "end_time_ns")}
        rec["run_id"] = run_id
        # RunConfig(storage_path): run_settings.run_config in 2.60; None where this Ray has none.
        settings = getattr(getattr(r, "run_settings", None), "run_config", None)
        rec["storage_path"] = getattr(settings, "storage_path", None) or None
        rec["attempts"] = [_attempt_record(a) for a in (attempts.get(run_id) or {}).values()]
        out.append(rec)
    return out


def live_runs(records: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The live runs among `train_run_records()` with their current attempt's workers (pure)."""
    out = []
    for r in records:
        if r["status"] not in TRAIN_ACTIVE:
            continue
        workers = r["attempts"][-1]["workers"] if r["attempts"] else []
        out.append({
            "run_id": r["run_id"], "name": r["name"], "job_id": r["job_id"], "status": r["status"],
            "world_size": len(workers),
            "workers": [{k: w[k] for k in ("world_rank", "local_rank", "node_id", "pid", "actor_id")}
                        for w in workers],
        })
    return out


def train_runs(timeout: float = 5.0) -> list[dict[str, Any]]:
    """Live Ray Train V2 runs with their current attempt's workers; [] without Train or runs."""
    return live_runs(train_run_records(timeout=timeout))
