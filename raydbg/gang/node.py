"""One node's WorkerStacks (agent side, in every node agent): identify the Ray workers here, then dump them in parallel.

A raydbg-activated worker is asked through its stacks thread first (cooperative_agent.ask_snapshot: no
ptrace stop, no process started; all at once), unless the request wants native frames or
use_thread=False (`thread=0`). py-spy for the others, and for a worker whose thread did not answer
(unless turned off: RAYDBG_STACKS_PYSPY=0 on the agent, or pyspy=False in the request),
16 at a time. The cooperative signal handler when py-spy fails (no ptrace rights: then
`pyspy_error` says why) or is off. A worker whose stacks cannot be taken carries an
`error`; it never fails the node's answer.
"""

from __future__ import annotations

import asyncio
import os
from typing import Any

from raydbg.gang import cooperative_agent, pyspy, worker_labels

PARALLEL = 16  # py-spy processes at once: each stops its target for a few ms
# --native is CPU work (unwinding and symbolizing torch's libraries): more at once than cores
# only stretches each dump, whose timeout runs meanwhile (4 at once on 2 loaded cores passed 12 s).
NATIVE_PARALLEL = max(1, os.cpu_count() or 1)
THREAD_TIMEOUT_S = 1.0  # a stacks thread that needs longer (its GIL held in C): py-spy instead


def _in_run(w: dict[str, Any], run: str) -> bool:
    return run in (w.get("train_run"), w.get("train_run_id"))


def pyspy_enabled() -> bool:
    return os.environ.get("RAYDBG_STACKS_PYSPY", "1") != "0"


def mark_paused(threads: list[dict[str, Any]], paused_ids: list[Any]) -> None:
    paused = {int(t) for t in paused_ids if t is not None}
    for t in threads:
        t["paused"] = bool(t.get("paused")) or int(t.get("thread_id") or 0) in paused


async def worker_stacks(worker: dict[str, Any], native: bool, use_pyspy: bool,
                        timeout: float = pyspy.DEFAULT_TIMEOUT_S, *, use_thread: bool = True,
                        pyspy_slots: asyncio.Semaphore | None = None) -> dict[str, Any]:
    """Fill `w` (an identity) with threads and source; `error` when no source worked."""
    errors: list[str] = []
    pyspy_error: str | None = None
    pid = int(worker["pid"])
    if use_thread and not native and cooperative_agent.listening(pid):
        try:
            snap = await cooperative_agent.ask_snapshot(pid, timeout=min(timeout, THREAD_TIMEOUT_S))
            worker["threads"], worker["source"], worker["cooperative_format"] = snap["threads"], "cooperative", "thread"
            for key in ("collectives", "process_groups", "p2p_waits"):  # a rank's wait-for graph inputs
                if snap.get(key) is not None:
                    worker[key] = snap[key]
            worker_labels.apply_labels(worker, {k: v for k, v in (snap.get("train") or {}).items() if worker.get(k) is None})
        except pyspy.StackError as exc:
            errors.append(str(exc))
    if use_pyspy and "threads" not in worker:
        try:
            async with pyspy_slots or asyncio.Semaphore(1):
                took = max(timeout, pyspy.NATIVE_TIMEOUT_S) if native else timeout
                worker["threads"], worker["source"] = await pyspy.dump(pid, native, took), "py-spy"
        except pyspy.StackError as exc:
            errors.append(pyspy_error := str(exc))
    if "threads" not in worker:
        try:
            threads, how = await cooperative_agent.request(pid, timeout=min(timeout, 3.0))
            worker["threads"], worker["source"], worker["cooperative_format"] = threads, "cooperative", how
            if pyspy_error:
                worker["pyspy_error"] = pyspy_error  # why the fallback answered (e.g. no ptrace rights)
        except (pyspy.StackError, OSError) as exc:
            errors.append(str(exc))
    if "threads" not in worker:
        worker.update(threads=[], source=None, error="; ".join(errors))
    mark_paused(worker["threads"], worker.pop("paused_threads", []))
    worker.pop("idle_worker", None)
    return worker


async def node_stacks(node_id: str, node_ip: str, *, pids: set[int] | None = None, job: str | None = None,
                      run: str | None = None, native: bool = False, use_pyspy: bool = True,
                      use_thread: bool = True,
                      labels: dict[int, dict[str, Any]] | None = None) -> list[dict[str, Any]]:
    """WorkerStacks of this node's Ray workers (filtered by pids, job and run before any dump)."""
    ids: list[dict[str, Any]] = await asyncio.to_thread(worker_labels.node_workers, node_id, node_ip, pids,
                                                        job is not None)
    for w in ids:
        worker_labels.apply_labels(w, (labels or {}).get(int(w["pid"])))
    if job is not None:
        ids = [w for w in ids if w.get("job_id") == job]
    if run is not None:  # a rank not labelled yet (it never reported) may say its run in its snapshot
        ids = [w for w in ids if w.get("train_run") is None or _in_run(w, run)]
    ids = [w for w in ids if w.get("task_name") is not None or w.get("actor_id")]  # not idle workers
    slots = asyncio.Semaphore(min(PARALLEL, NATIVE_PARALLEL) if native else PARALLEL)
    use_pyspy = use_pyspy and pyspy_enabled()

    def pyspy_for(w: dict[str, Any]) -> bool:
        # Under a run filter an unlabelled worker is asked only through its stacks thread: one
        # raydbg is not active in cannot name its run, so py-spy on it would be wasted.
        return use_pyspy and (run is None or w.get("train_run") is not None)

    out = list(await asyncio.gather(*(worker_stacks(w, native, pyspy_for(w), use_thread=use_thread, pyspy_slots=slots)
                                      for w in ids)))
    if run is not None:
        out = [w for w in out if _in_run(w, run)]
    await asyncio.to_thread(cooperative_agent.prune)  # files of workers that died since the last request
    return out
