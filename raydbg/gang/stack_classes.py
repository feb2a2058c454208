"""Stack classes: identical stacks of many workers merged, odd ones first; Train run summaries (pure).

Input is a list of WorkerStacks dicts (see docs/hangs.md); nothing here imports Ray.
A worker's class is decided by its *main* thread, the one doing the work: the thread
raydbg has paused, else a Ray Train worker's training thread, else the thread with the
most user frames (a Train worker's MainThread only runs Ray's task loop). Other
threads stay in the full per-worker view.
"""

from __future__ import annotations

import hashlib
import time
from collections.abc import Mapping, Sequence
from typing import Any

from raydbg.gang import wait_for
from raydbg.gang.frames import collective_frame, paused_at, short_name, summary, user_frames

Worker = dict[str, Any]
Thread = dict[str, Any]

TRAIN_THREAD_PREFIX = "TrainingThread("
# Threads of raydbg and debugpy themselves: never the one that matters.
_OWN_THREADS = ("raydbg-", "pydevd.", "ray_print_logs", "ray_listen_error_messages")


def _own(thread: Thread) -> bool:
    return str(thread.get("name") or "").startswith(_OWN_THREADS)


def is_training_thread(thread: Thread) -> bool:
    """Ray Train's thread that runs the user's training function."""
    return str(thread.get("name") or "").startswith(TRAIN_THREAD_PREFIX)


def main_thread(worker: Worker) -> Thread | None:
    threads = [t for t in worker.get("threads") or [] if not _own(t)]
    if not threads:
        return None
    for t in threads:
        if t.get("paused"):
            return t
    for t in threads:
        if is_training_thread(t):
            return t

    def score(t: Thread) -> tuple[int, int, int]:
        return (len(user_frames(t.get("frames") or [])), not t.get("idle"), t.get("name") == "MainThread")

    return max(threads, key=score)


def worker_paused(worker: Worker) -> bool:
    return bool(worker.get("paused"))


def key(worker: Worker) -> tuple[Any, ...]:
    t = main_thread(worker)
    paused = worker_paused(worker)
    frames = (t or {}).get("frames") or []
    # Short names: py-spy says `Thread.run` where faulthandler says `run`.
    stack = tuple((f.get("file"), short_name(str(f.get("function"))), f.get("line"))
                  for f in (paused_at(frames) if paused else frames))
    return (paused, stack)


def class_id(key: tuple[Any, ...]) -> str:
    return hashlib.sha1(repr(key).encode()).hexdigest()[:10]


def _member(w: Worker) -> dict[str, Any]:
    return {"node_id": w.get("node_id"), "pid": w.get("pid"), "world_rank": w.get("world_rank")}


def _member_order(m: dict[str, Any]) -> tuple[Any, ...]:
    rank = m.get("world_rank")
    return (rank is None, rank if rank is not None else 0, str(m.get("node_id")), int(m.get("pid") or 0))


def group(workers: Sequence[Worker]) -> list[dict[str, Any]]:
    """StackClass list: one per distinct main-thread stack; paused first, then smallest first."""
    by_key: dict[tuple[Any, ...], list[Worker]] = {}
    for w in workers:
        by_key.setdefault(key(w), []).append(w)
    out = []
    for k, members in by_key.items():
        t = main_thread(members[0]) or {}
        frames = list(t.get("frames") or [])
        paused = bool(k[0])
        out.append({
            "id": class_id(k),
            "summary": summary(frames, paused=paused),
            "members": sorted((_member(w) for w in members), key=_member_order),
            "count": len(members),
            "total": len(workers),
            "paused": paused,
            "in_collective": not paused and collective_frame(frames) is not None,
            "thread": t.get("name"),
            "frames": frames,
        })
    out.sort(key=lambda c: (not c["paused"], c["count"], c["summary"]))
    return out


def _progress_ts(progress: Mapping[Any, float], w: Worker) -> float | None:
    for k in ((w.get("job_id"), w.get("train_run"), w.get("world_rank")), w.get("pid")):
        if k in progress:
            return float(progress[k])
    return None


def runs(workers: Sequence[Worker], progress: Mapping[Any, float] | None = None,
         now: float | None = None) -> list[dict[str, Any]]:
    """RunSummary per Train run among `workers`: ranks, who is paused, who waits in a collective."""
    progress = progress or {}
    now = time.time() if now is None else now
    by_run: dict[tuple[str, str], list[Worker]] = {}
    for w in workers:
        if w.get("train_run") and w.get("world_rank") is not None:
            by_run.setdefault((str(w.get("job_id") or ""), str(w["train_run"])), []).append(w)
    # Per distinct stack, once: the ranks of a big run share a few stacks (4,096 ranks, ~1 s less).
    seen: dict[tuple[Any, ...], tuple[str, bool]] = {}

    def class_and_wait(w: Worker) -> tuple[str, bool]:
        k = key(w)
        if k not in seen:
            frames = (main_thread(w) or {}).get("frames") or []
            seen[k] = (class_id(k), not k[0] and collective_frame(frames) is not None)
        return seen[k]

    out = []
    for (job_id, run), members in sorted(by_run.items()):
        members = sorted(members, key=lambda w: int(w["world_rank"]))
        paused = [int(w["world_rank"]) for w in members if worker_paused(w)]
        ranks: list[dict[str, Any]] = []
        waiting: list[int] = []
        not_waiting: list[int] = []
        for w in members:
            rank = int(w["world_rank"])
            cid, in_coll = class_and_wait(w)
            (waiting if in_coll else not_waiting).append(rank)
            ts = _progress_ts(progress, w)
            state = "paused" if worker_paused(w) else ("held" if paused else "running")
            ranks.append({
                "world_rank": rank,
                "local_rank": w.get("local_rank"),
                "node_id": w.get("node_id"),
                "pid": w.get("pid"),
                "state": state,
                "session_ids": list(w.get("session_ids") or []),
                "class_id": cid,
                "last_progress_s": None if ts is None else max(0.0, now - ts),
            })
        sizes = [int(w["world_size"]) for w in members if w.get("world_size")]
        size = max(sizes) if sizes else len(members)
        # Who waits for whom over every group and send/recv pair (Flight Recorder, the ranks'
        # group tables and send/recv frames): the culprits are the roots, cycles deadlocks.
        graph = wait_for.run_fields(members, size, lambda w: summary((main_thread(w) or {}).get("frames") or [],
                                                                     paused=worker_paused(w)))
        for r, w in zip(ranks, members, strict=True):
            r["collectives"] = wait_for.rank_collectives(w.get("collectives"), graph["groups"])
        out.append({
            "run": run,
            "job_id": job_id,
            "world_size": size,
            "ranks": ranks,
            "held_by": paused,
            "waiting": waiting,
            "not_waiting": not_waiting,
            **graph,
        })
    return out
