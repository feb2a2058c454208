"""Cluster-wide stacks and progress on the gateway: every agent asked in parallel, merged; stacks grouped.

A node that does not answer becomes an entry in `errors`; the rest of the answer stands.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

from raydbg import _ray_internals, dial, progress_records, registry, schema, validate
from raydbg.gang import node, pyspy, stack_classes, worker_labels
from raydbg.telemetry import attempts

AGENT_TIMEOUT_S = 15.0  # an agent's stacks: py-spy dumps of every worker on its node
PROGRESS_TIMEOUT_S = 5.0  # an agent's progress records: one small file read per worker
TRAIN_WAIT_S = 1.0  # how long the merged answer waits for Train's state actor after the dumps


def _train_runs() -> list[dict[str, Any]]:
    """Every run Train's state actor knows, with its attempts (one call; [] without it)."""
    try:
        return _ray_internals.train_run_records()
    except Exception:
        return []  # no Train state (or it is slow to answer): stacks without Train labels or attempts


async def merged_progress(token: str, self_node_id: str) -> tuple[list[dict[str, Any]], list[dict[str, str]]]:
    """Beats of every node: this one read directly, the others through their agents."""
    out: list[dict[str, Any]] = list(await asyncio.to_thread(progress_records.read_all))
    answers, errors = await dial.ask_agents("/api/v1/progress/local", token=token, skip_node_id=self_node_id,
                                            timeout_s=PROGRESS_TIMEOUT_S)
    for beats in answers:
        out.extend(_valid_beats(beats))
    return out, errors


def _valid_beats(beats: Any) -> list[dict[str, Any]]:
    """Another node's beats: each a ProgressBeat, or skipped."""
    out: list[dict[str, Any]] = []
    for beat in beats if isinstance(beats, list) else []:
        try:
            out.append(validate.check(schema.ProgressBeat, beat, fill=False))
        except validate.Malformed:
            continue
    return out


def _query(pids: list[int] | None, job: str | None, run: str | None, native: bool,
           use_pyspy: bool, use_thread: bool) -> dict[str, str]:
    q = {"native": "1" if native else "0", "pyspy": "1" if use_pyspy else "0", "thread": "1" if use_thread else "0"}
    if pids is not None:
        q["pids"] = ",".join(map(str, pids))
    if job:
        q["job"] = job
    if run:
        q["run"] = run
    return q


async def cluster_stacks(job: str | None = None, run: str | None = None, native: bool = False, *,
                         token: str = "", self_node_id: str = "", use_pyspy: bool = True,
                         use_thread: bool = True) -> dict[str, Any]:
    """The /api/v1/stacks answer (see docs/hangs.md for the shape)."""
    start = time.monotonic()
    # Train's state actor (when there is one) is asked while the agents dump: each agent
    # knows its own ranks from the progress records and filters by run itself, so the
    # state actor's labels are only merged in afterwards (its first lookup imports
    # Ray Train: seconds, measured 4 s on a loaded 2-core machine).
    train = asyncio.ensure_future(asyncio.to_thread(_train_runs))
    agents = await asyncio.to_thread(registry.agents)
    errors: list[dict[str, Any]] = []
    workers: list[dict[str, Any]] = []
    # Each node's progress beats come with its stacks (one fan-out): how long ago each rank progressed.
    beats: list[dict[str, Any]] = []

    own = next((a for a in agents if a.get("port") and a.get("node_id") == self_node_id), None)

    async def own_node() -> None:
        try:
            beats.extend(await asyncio.to_thread(progress_records.read_all))
        except Exception:
            pass  # stacks without this node's progress ages
        if own is None:
            return
        try:
            workers.extend(await node.node_stacks(self_node_id, str(own.get("node_ip")), job=job, run=run,
                                                  native=native, use_pyspy=use_pyspy, use_thread=use_thread))
        except Exception as exc:
            errors.append({"node_id": self_node_id, "error": str(exc) or type(exc).__name__})

    async def other_nodes() -> None:
        answers, failed = await dial.ask_agents("/api/v1/node/stacks", _query(None, job, run, native, use_pyspy, use_thread),
                                                token=token, skip_node_id=self_node_id,
                                                timeout_s=AGENT_TIMEOUT_S + (pyspy.NATIVE_TIMEOUT_S if native else 0))
        for body in answers:
            for w in body.get("workers") or [] if isinstance(body, dict) else []:
                try:  # another node's agent (maybe another version): checked as a WorkerStacks
                    workers.append(validate.check(schema.WorkerStacks, w, fill=False))
                except validate.Malformed as exc:
                    who = w if isinstance(w, dict) else {}
                    errors.append({"node_id": str(who.get("node_id", "")), "pid": who.get("pid"),
                                   "error": f"malformed stacks record: {exc}"})
            beats.extend(_valid_beats(body.get("progress") if isinstance(body, dict) else None))
        errors.extend(failed)

    await asyncio.gather(own_node(), other_nodes())
    progress = progress_records.as_progress_map(beats)
    try:
        records = await asyncio.wait_for(asyncio.shield(train), TRAIN_WAIT_S)
    except asyncio.TimeoutError:
        records = []  # still importing Ray Train: this answer goes without its labels and attempts
    labels = worker_labels.train_labels(_ray_internals.live_runs(records))
    for w in workers:
        worker_labels.apply_labels(w, labels.get((str(w.get("node_id")), int(w.get("pid") or 0))))
    if run is not None:
        workers = [w for w in workers if run in (w.get("train_run"), w.get("train_run_id"))]
        if not workers:
            errors.append({"node_id": "", "error": f"no worker of a Ray Train run named {run}"})
    workers.sort(key=lambda w: (w.get("train_run") or "", w.get("world_rank") if w.get("world_rank") is not None
                                else 1 << 30, str(w.get("node_id")), int(w.get("pid") or 0)))
    for w in workers:
        if w.get("error"):
            errors.append({"node_id": str(w.get("node_id")), "pid": w.get("pid"), "error": w["error"]})
    dumped = [w for w in workers if w.get("threads")]
    runs = stack_classes.runs(workers, progress)
    summaries = attempts.summarize(records)
    for r in runs:
        r["attempts"] = attempts.attempts_of(summaries, r["run"], r["job_id"])
    return {
        "workers": workers,
        "classes": stack_classes.group(dumped),
        "runs": runs,
        "errors": errors,
        "took_s": round(time.monotonic() - start, 4),
    }

