"""One node's WorkerStacks: identify the Ray workers here, then dump them in parallel.

py-spy first (unless turned off: RAYDBG_STACKS_PYSPY=0 on the agent, or pyspy=False in
the request), the cooperative signal handler of raydbg-activated workers when py-spy
fails (no ptrace rights: then `pyspy_error` says why) or is off. A worker whose stacks
cannot be taken carries an `error`; it never fails the node's answer.
"""

from __future__ import annotations

import asyncio
import os
from typing import Any

from raydbg.gang import cooperative, pyspy, worker_labels

PARALLEL = 16  # py-spy processes at once: each stops its target for a few ms


def pyspy_enabled() -> bool:
    return os.environ.get("RAYDBG_STACKS_PYSPY", "1") != "0"


def mark_paused(threads: list[dict[str, Any]], paused_ids: list[Any]) -> None:
    paused = {int(t) for t in paused_ids if t is not None}
    for t in threads:
        t["paused"] = bool(t.get("paused")) or int(t.get("thread_id") or 0) in paused


async def worker_stacks(w: dict[str, Any], native: bool, use_pyspy: bool,
                        timeout: float = pyspy.DEFAULT_TIMEOUT_S) -> dict[str, Any]:
    """Fill `w` (an identity) with threads and source; `error` when no source worked."""
    errors = []
    if use_pyspy:
        try:
            w["threads"], w["source"] = await pyspy.dump(int(w["pid"]), native, timeout), "py-spy"
        except pyspy.StackError as exc:
            errors.append(str(exc))
    if "threads" not in w:
        try:
            threads, how = await cooperative.request(int(w["pid"]), timeout=min(timeout, 3.0))
            w["threads"], w["source"], w["cooperative_format"] = threads, "cooperative", how
            if errors:
                w["pyspy_error"] = errors[0]  # why the fallback answered (e.g. no ptrace rights)
        except (pyspy.StackError, OSError) as exc:
            errors.append(str(exc))
    if "threads" not in w:
        w.update(threads=[], source=None, error="; ".join(errors))
    mark_paused(w["threads"], w.pop("paused_threads", []))
    w.pop("idle_worker", None)
    return w


async def node_stacks(node_id: str, node_ip: str, *, pids: set[int] | None = None, job: str | None = None,
                      run: str | None = None, native: bool = False, use_pyspy: bool = True,
                      labels: dict[int, dict[str, Any]] | None = None) -> list[dict[str, Any]]:
    """WorkerStacks of this node's Ray workers (filtered by pids, job and run before any dump)."""
    ids: list[dict[str, Any]] = await asyncio.to_thread(worker_labels.node_workers, node_id, node_ip, pids,
                                                        job is not None)
    for w in ids:
        worker_labels.apply_labels(w, (labels or {}).get(int(w["pid"])))
    if job is not None:
        ids = [w for w in ids if w.get("job_id") == job]
    if run is not None:
        ids = [w for w in ids if run in (w.get("train_run"), w.get("train_run_id"))]
    ids = [w for w in ids if w.get("task_name") is not None or w.get("actor_id")]  # not idle workers
    sem = asyncio.Semaphore(PARALLEL)
    use_pyspy = use_pyspy and pyspy_enabled()

    async def one(w: dict[str, Any]) -> dict[str, Any]:
        async with sem:
            return await worker_stacks(w, native, use_pyspy)

    out = list(await asyncio.gather(*(one(w) for w in ids)))
    await asyncio.to_thread(cooperative.prune)  # files of workers that died since the last request
    return out
