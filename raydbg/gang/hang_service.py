"""The hang and straggler detectors in the gateway agent: every few seconds merge beats and sessions, record events.

For each run the decider (raydbg/gang/hang.py) calls hung, once: the run's stacks are
taken (raydbg.gang.cluster_view.cluster_stacks) and grouped into classes, and a `hang` event
carries them (`raydbg events`, the TUI's events pane), with an OTel counter and span,
and the run's wait-for graph: the culprits with their stack class, and the chain of who
waits for whom (one line per hop, the first ones in the message).
For each rank raydbg/gang/stragglers.py finds slower than the others step after step, a
`straggler` event carries the rank's figures and its stack class: the one it is most often
alone in over several samples (at its own work while the others wait). Nothing is stopped.
RAYDBG_HANG_AFTER_S (default 300) sets the hang threshold; RAYDBG_STRAGGLER_* the other.
"""

from __future__ import annotations

import asyncio
import logging
import statistics
import time
from typing import Any

from aiohttp import web

from raydbg import _ray_internals, registry, telemetry
from raydbg.agent.server import AgentServer
from raydbg.gang import cluster_view, hang, stragglers
from raydbg.worker import resume

log = logging.getLogger("raydbg.agent")

HANGS = telemetry.counter("raydbg.gang.hangs", "{run}", "Runs that made no progress for RAYDBG_HANG_AFTER_S")
STRAGGLERS = telemetry.counter("raydbg.gang.stragglers", "{rank}", "Ranks that worked longer than the others, step after step")
MESSAGE_HOPS = 8  # lines of the wait-for chain in a hang event's message (its details have them all)
STRAGGLER_SAMPLES = 20  # stack samples at most, to catch the straggler at its own work
STRAGGLER_ALONE = 5  # samples with the straggler alone in its class, to choose among
STRAGGLER_CHECK_S = 1.0  # a straggler is judged over its last steps: look often, it costs one merge


def _state_api() -> str | None:
    """This cluster's own State API (its dashboard's URL), None without one. By its address:
    with none, Ray looks for "the" Ray instance of this machine, may find another one (another
    user's) and points this process's KV client at it; and without a dashboard it retries 40 s."""
    try:
        return _ray_internals.dashboard_url(registry.client())
    except Exception:
        return None


def _task_running(task_id: str | None, url: str | None) -> bool:
    """A non-Train worker's beats count while the task that made them runs (else it is idle)."""
    if not task_id or url is None:
        return True  # no task, or no State API: unknown, report rather than miss a hang
    try:
        from ray.util.state import get_task

        task = get_task(task_id, address=url, timeout=5)
        states = [getattr(t, "state", None) for t in (task if isinstance(task, list) else [task]) if t]
        return not states or any(s == "RUNNING" for s in states)
    except Exception:
        return True  # unknown: report rather than miss a hang


def still_running(run: hang.RunKey, recs: list[dict[str, Any]]) -> bool:
    if run[1]:
        return True  # a Train rank's record goes when its run shuts down or its process dies
    url = _state_api()
    return any(_task_running(r.get("task_id"), url) for r in recs)


async def stacks_for(server: AgentServer, job_id: str, run: str | None) -> dict[str, Any]:
    """Grouped stacks of the run; an error text instead when stacks cannot be taken."""
    try:
        got = await cluster_view.cluster_stacks(job=job_id or None, run=run, token=server.token,
                                                self_node_id=server.node_id)
        return {"classes": got["classes"], "runs": got["runs"], "errors": got["errors"]}
    except Exception as exc:
        log.exception("raydbg: stacks for a hang event failed")
        return {"classes": [], "runs": [], "errors": [{"node_id": "", "error": str(exc)}]}


async def record(server: AgentServer, found: dict[str, Any]) -> dict[str, Any]:
    with telemetry.span("raydbg.gang.hang", job_id=found["job_id"], train_run=found.get("train_run") or "",
                        stalled_for_s=found["stalled_for_s"]):
        stacks = await stacks_for(server, found["job_id"], found.get("train_run"))
        HANGS.add(1, train="yes" if found.get("train_run") else "no")
        details = dict(found, **stacks, **culprits_of(stacks, found.get("train_run")))
        text = hang.message(found) + "".join(f"; {line}" for line in details["chain"][:MESSAGE_HOPS])
        event = await asyncio.to_thread(lambda: registry.record_event("hang", text, **details))
    log.warning("raydbg: %s", text)
    return dict(event)


def culprits_of(stacks: dict[str, Any], train_run: str | None) -> dict[str, Any]:
    """From the run's wait-for graph (raydbg/gang/wait_for.py): who waits for whom, the
    culprits (the roots) with their stack class, deadlocks, mismatches and the chain."""
    run = next((r for r in stacks.get("runs") or [] if train_run and r.get("run") == train_run), None)
    if run is None:
        return {"waits": [], "culprits": [], "deadlocks": [], "mismatches": [], "chain": []}
    by_rank = {r["world_rank"]: r for r in run["ranks"]}

    def named(rank: int) -> dict[str, Any]:
        r = by_rank.get(rank, {})
        return {"world_rank": rank, "node_id": r.get("node_id"), "pid": r.get("pid"),
                "stack_class": class_of(stacks, r.get("pid"))}

    return {"waits": run["waits"], "culprits": [named(rank) for rank in run["culprits"]],
            "deadlocks": run["deadlocks"], "mismatches": run["mismatches"], "chain": run["chain"]}


def class_of(stacks: dict[str, Any], pid: Any) -> dict[str, Any] | None:
    """The stack class (id, summary, frames) the worker `pid` is in, if it was dumped."""
    for c in stacks.get("classes") or []:
        if any(m.get("pid") == pid for m in c.get("members") or []):
            return {k: c.get(k) for k in ("id", "summary", "count", "total", "in_collective", "frames")}
    return None


async def straggler_class(server: AgentServer, found: dict[str, Any]) -> tuple[dict[str, Any] | None, list[Any]]:
    """Where the straggler spends its extra time: over several samples, the stack class it is
    most often alone in (at work while the others wait). One sample alone can catch it anywhere
    a loaded machine's scheduling left it behind (its optimizer step, say). Errors of the last
    sample."""
    # The straggler is alone only for its extra time each step: samples half of that apart.
    extra = statistics.median(found["busy_s"]) - statistics.median(found["others_median_s"])
    alone: dict[str, list[dict[str, Any]]] = {}  # class id -> that class, once per sample alone in it
    klass, errors = None, []
    for _ in range(STRAGGLER_SAMPLES):
        stacks = await stacks_for(server, found["job_id"], found["train_run"])
        klass, errors = class_of(stacks, found.get("pid")), stacks["errors"]
        if klass is not None and klass["count"] == 1:
            alone.setdefault(klass["id"], []).append(klass)
            if sum(map(len, alone.values())) >= STRAGGLER_ALONE:
                break
        await asyncio.sleep(max(0.02, extra / 2))
    if alone:  # the most frequent; of equals, the first seen
        return max(alone.values(), key=len)[-1], errors
    return klass, errors


async def record_straggler(server: AgentServer, found: dict[str, Any]) -> dict[str, Any]:
    with telemetry.span("raydbg.gang.straggler", job_id=found["job_id"], train_run=found["train_run"],
                        world_rank=found["world_rank"]):
        klass, errors = await straggler_class(server, found)
        STRAGGLERS.add(1)
        details = dict(found, stack_class=klass, errors=errors)
        event = await asyncio.to_thread(
            lambda: registry.record_event("straggler", stragglers.message(found), **details))
    log.warning("raydbg: %s", stragglers.message(found))
    return dict(event)


async def run_forever(server: AgentServer, hang_after: float, slow: stragglers.StragglerDecider) -> None:
    decider = hang.HangDecider(hang_after)
    last_prune = 0.0
    while True:
        await asyncio.sleep(min(hang.check_every_s(hang_after), STRAGGLER_CHECK_S))
        try:
            beats, _ = await cluster_view.merged_progress(server.token, server.node_id)
            sessions = await asyncio.to_thread(registry.sessions)
            now = time.time()
            found = await asyncio.to_thread(decider.update, beats, sessions, now, still_running)
            for one in found:
                await record(server, one)
            for one in slow.update(beats, sessions):
                await record_straggler(server, one)
            if now - last_prune > 600:
                last_prune = now
                await asyncio.to_thread(resume.prune)
        except asyncio.CancelledError:
            raise
        except Exception:
            log.exception("raydbg: hang detector round failed")


# At module level: AppKey looks for a `<module>` frame, which the agent's server thread has not.
_HANG_TASK = web.AppKey("raydbg_hang_task", asyncio.Task)
_STRAGGLERS = web.AppKey("raydbg_stragglers", stragglers.StragglerDecider)


def open_stragglers(app: web.Application) -> set[tuple[stragglers.RunKey, int]]:
    """(run, rank) of each straggler named by an event that has not caught up since: `raydbg
    steps` marks them as the events do (its own window alone flickers on a loaded machine)."""
    decider = app.get(_STRAGGLERS)
    return set(decider.flagged) if decider is not None else set()


def attach(server: AgentServer, app: web.Application) -> None:
    """Run the detector for the life of the gateway app."""
    key = _HANG_TASK

    app[_STRAGGLERS] = stragglers.StragglerDecider()

    async def start(app: web.Application) -> None:
        app[key] = asyncio.create_task(run_forever(server, hang.hang_after_s(), app[_STRAGGLERS]))

    async def stop(app: web.Application) -> None:
        task = app.get(key)
        if task is not None:
            task.cancel()

    app.on_startup.append(start)
    app.on_cleanup.append(stop)
