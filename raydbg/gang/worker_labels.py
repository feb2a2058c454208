"""Who each Ray worker on this node is (agent side): job, task or actor, Train run and ranks, paused or not.

Sources, cheapest first: the raylet's children and their `ray::` process titles (psutil),
the progress records activated Train workers write on this node when their process group
is set up (raydbg/progress_records.py: run name, world and local rank, world size; a file
read per worker, no Ray call), raydbg's session records (paused threads), GCS's actor
table (actor id, name, job; works without the dashboard), GCS task events only when a
task worker's job is asked for. Ray Train's own state actor knows the ranks too, but
only exists with RAY_TRAIN_ENABLE_STATE_TRACKING=1 (off by default in Ray 2.60): the
gateway reads it once per request when it is there (`train_labels`) and applies it to
the merged answer.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from typing import Any

import psutil

from raydbg import ray_processes


def node_processes(raylet_pid: int | None = None) -> dict[int, str]:
    """{pid: title name} of the raylet's worker children (the agent runs under the same raylet)."""
    try:
        children = ray_processes.raylet_children(raylet_pid)
    except psutil.Error:
        return {}
    out = {}
    for p in children:
        try:
            title = p.cmdline()[0] if p.cmdline() else p.name()
        except (psutil.Error, IndexError):
            continue
        name = ray_processes.title_name(title)
        name = title if name is None else name  # a child not titled `ray::`: its own name
        if name and name not in ray_processes.NOT_WORKERS and p.pid != os.getpid():
            out[p.pid] = name
    return out


def base_identity(pid: int, title: str, node_id: str, node_ip: str) -> dict[str, Any]:
    return {
        "node_id": node_id, "node_ip": node_ip, "pid": pid, "job_id": None, "actor_id": None,
        "actor_name": None, "task_name": None if title == ray_processes.IDLE_TITLE else title,
        "idle_worker": title == ray_processes.IDLE_TITLE,
        "train_run": None, "world_rank": None, "local_rank": None, "world_size": None,
        "paused": False, "session_ids": [], "paused_threads": [],
    }


def apply_actors(ids: dict[int, dict[str, Any]], actors: Iterable[Any]) -> None:
    for a in actors:
        w = ids.get(int(a.pid))
        if w is not None:
            w.update(actor_id=a.actor_id, actor_name=a.name or a.class_name, job_id=a.job_id or w["job_id"])


def apply_sessions(ids: dict[int, dict[str, Any]], sessions: Iterable[dict[str, Any]], node_id: str) -> None:
    """Paused by raydbg: the worker's session records (one per paused thread)."""
    for rec in sessions:
        if rec.get("node_id") != node_id:
            continue
        w = ids.get(int(rec.get("pid") or 0))
        if w is None:
            continue
        w["paused"] = True
        w["session_ids"].append(rec.get("id"))
        w["paused_threads"].append(rec.get("thread_id"))
        w["job_id"] = w["job_id"] or rec.get("job_id")
        for mine, theirs in (("world_rank", "train_rank"), ("train_run", "train_run"),
                             ("local_rank", "train_local_rank"), ("world_size", "train_world_size")):
            if w[mine] is None and rec.get(theirs) is not None:
                w[mine] = rec[theirs]


def apply_progress(ids: dict[int, dict[str, Any]], recs: Iterable[dict[str, Any]], node_id: str) -> None:
    """Train identity from this node's progress records (the newest record of each pid)."""
    for rec in sorted(recs, key=lambda r: float(r.get("ts") or 0)):
        w = ids.get(int(rec.get("pid") or 0))
        if w is None or rec.get("train_run") is None or rec.get("node_id") not in (None, "", node_id):
            continue
        w.update(train_run=rec["train_run"], world_rank=rec.get("world_rank"),
                 local_rank=rec.get("local_rank"), world_size=rec.get("world_size"))
        w["job_id"] = w["job_id"] or rec.get("job_id") or None


def _progress_records() -> list[dict[str, Any]]:
    try:
        from raydbg import progress_records as progress

        return list(progress.read_all())
    except Exception:
        return []


def apply_labels(worker: dict[str, Any], labels: dict[str, Any] | None) -> None:
    for k, v in (labels or {}).items():
        if v is not None:
            worker[k] = v


def train_labels(runs: list[dict[str, Any]]) -> dict[tuple[str, int], dict[str, Any]]:
    """{(node_id, pid): Train labels} from `_ray_internals.train_runs()` (pure)."""
    out: dict[tuple[str, int], dict[str, Any]] = {}
    for run in runs:
        for w in run["workers"]:
            out[(str(w["node_id"]), int(w["pid"]))] = {
                "train_run": run["name"], "train_run_id": run["run_id"], "job_id": run["job_id"],
                "world_rank": w["world_rank"], "local_rank": w["local_rank"],
                "world_size": run["world_size"], "actor_id": w["actor_id"],
            }
    return out


def node_workers(node_id: str, node_ip: str, pids: set[int] | None = None,
                 want_task_jobs: bool = False) -> list[dict[str, Any]]:
    """Identity of every Ray worker on this node (or of `pids`), blocking (GCS reads)."""
    from raydbg import registry

    procs = node_processes()
    if pids is not None:
        procs = {p: t for p, t in procs.items() if p in pids}
    ids = {pid: base_identity(pid, title, node_id, node_ip) for pid, title in procs.items()}
    if not ids:
        return []
    from raydbg.gcs_tables import GcsTables

    view = GcsTables()
    apply_actors(ids, view.actors(node_id))
    apply_progress(ids, _progress_records(), node_id)
    apply_sessions(ids, registry.sessions(), node_id)
    if want_task_jobs and any(w["job_id"] is None and not w["idle_worker"] for w in ids.values()):
        for t in view.running_tasks(node_id):  # every task event: only when a job filter needs it
            w = ids.get(t.worker_pid)
            if w is not None and w["job_id"] is None:
                w["job_id"] = t.job_id
    return sorted(ids.values(), key=lambda w: w["pid"])
