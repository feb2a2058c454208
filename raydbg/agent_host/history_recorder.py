"""The gateway's history recorder: tails the registry, the runs' beats and Train's state into each job's record (runs in the head's agent).

The one writer of the records (raydbg/history/writer.py): events are recorded where they
happen (every node's memory monitor, the gateway's detectors) but reach the record only
through this loop, which reads new `event/` keys every POLL_S; session lifecycles come from
comparing two listings; every SLOW_S, each Train rank's new step times (downsampled to
one median per rank), each node's memory, Train attempts that changed, and the head's
new telemetry spans. A Train run's job's record is also written under the run's
RunConfig(storage_path) once Train's state names it (a second writer, its own files). Entries with no job (a node's memory, a monitor failure) go to every
job seen in the last ACTIVE_S. Nothing here can fail or slow a job: errors are logged and
the next round tries again.

A cluster's processes are killed, not stopped, when it goes down (the agent gets no SIGTERM, no
exit handler runs), so what happened since the last round would be lost: a driver that owns
its cluster asks for one more round first (`record_now`, from raydbg/agent_host/lifecycle.py).
"""

from __future__ import annotations

import asyncio
import logging
import os
import platform
import re
import statistics
import threading
import time
from collections import OrderedDict
from typing import Any

from aiohttp import web

from raydbg import _ray_internals, registry
from raydbg.agent.server import AgentServer
from raydbg.gang import cluster_view, step_table
from raydbg.history import lifecycle, spans, store, writer
from raydbg.telemetry import attempts, output_dir
from raydbg.version import __version__

log = logging.getLogger("raydbg.agent")

POLL_S = 2.0
SLOW_S = 10.0
ACTIVE_S = 600.0
_SEEN_MAX = 5000


class Recorder:
    def __init__(self, server: AgentServer, out: writer.HistoryWriter) -> None:
        self.server = server
        self.out = out
        self.seen: OrderedDict[str, None] = OrderedDict()  # event keys recorded
        self.sessions: dict[str, dict[str, Any]] = {}
        self.jobs: dict[str, float] = {}  # job -> last seen
        self.attempt_state: dict[tuple[str, int], tuple[Any, ...]] = {}
        self.last_step: dict[tuple[str, str, int], int] = {}
        self.nodes: set[tuple[str, str]] = set()
        self.spans = spans.SpanTail(output_dir.session_telemetry_dir())
        self.next_slow = 0.0
        self.copies: dict[str, dict[str, writer.HistoryWriter]] = {}  # job -> storage_path -> its writer
        self.tried: set[tuple[str, str]] = set()
        self.round_lock = threading.Lock()  # the loop's rounds and record_now's
        import ray

        session = os.path.basename(_ray_internals.session_dir() or "").removeprefix("session_")
        # Every cluster's first job is 01000000: a record is the job of one Ray session.
        self.tag = re.sub(r"[^A-Za-z0-9_.-]", "_", session or time.strftime("%Y-%m-%d_%H-%M-%S"))[:80]
        self.versions = {"raydbg": __version__, "ray": ray.__version__, "python": platform.python_version(),
                         "gateway_node": server.node_id}

    def _job(self, job: str, now: float) -> None:
        if job and job not in self.jobs:
            self.out.add(job, "job", dict(self.versions, ray_session=self.tag), record=self.record(job))
        if job:
            self.jobs[job] = now

    def record(self, job: str) -> str:
        return f"{job}-{self.tag}"

    def active(self, now: float) -> list[str]:
        return [j for j, seen in self.jobs.items() if now - seen < ACTIVE_S]

    def _to(self, job: str | None, kind: str, data: dict[str, Any], now: float, ts: float | None = None) -> None:
        for j in [job] if job else self.active(now):
            self._job(j, now)
            self.out.add(j, kind, data, ts, record=self.record(j))
            for copy in self.copies.get(j, {}).values():
                copy.add(j, kind, data, ts, record=self.record(j))

    def copy_to_storage(self, job: str, run: dict[str, Any]) -> None:
        """From now on, the job's record also goes under the Train run's RunConfig(storage_path)
        (`<storage_path>/<run>/raydbg-history/`), where its checkpoints are."""
        path, name = run.get("storage_path"), str(run.get("run") or "")
        if not job or not path or not store.JOB_NAME.fullmatch(name) or (job, path) in self.tried:
            return
        self.tried.add((job, path))  # once: a place that cannot be opened is said once, not every round
        try:
            where = f"{str(path).rstrip('/')}/{name}/raydbg-history"
            copy = writer.HistoryWriter(store.open_store(where)).start()
        except Exception as exc:
            log.warning("raydbg: no copy of job %s's record under %s: %s", job, path, exc)
            return
        self.copies.setdefault(job, {})[path] = copy
        copy.add(job, "job", dict(self.versions, ray_session=self.tag), record=self.record(job))

    # --- every POLL_S ----------------------------------------------------------------------------
    def events_and_sessions(self) -> None:
        with self.round_lock:
            self._events_and_sessions()

    def _events_and_sessions(self) -> None:
        now = time.time()
        sessions = {s["id"]: s for s in registry.sessions()}
        for s in sessions.values():
            self._job(s.get("job_id") or "", now)
        for ev in lifecycle.changes(self.sessions, sessions, now):
            self._to(ev["details"].get("job_id"), "event", ev, now, ev["ts"])
        old_sessions, self.sessions = self.sessions, sessions
        for key in sorted(registry.keys(registry.EVENT)):
            if key in self.seen:
                continue
            self.seen[key] = None
            if len(self.seen) > _SEEN_MAX:
                self.seen.popitem(last=False)
            found = registry.get(key)
            if found is not None:
                self._to(self.job_of(found, old_sessions), "event", found, now, found.get("ts"))

    def job_of(self, ev: dict[str, Any], old_sessions: dict[str, dict[str, Any]]) -> str | None:
        d = ev.get("details") or {}
        victim: dict[str, Any] = d["victim"] if isinstance(d.get("victim"), dict) else {}
        session = self.sessions.get(str(d.get("session"))) or old_sessions.get(str(d.get("session"))) or {}
        return d.get("job_id") or victim.get("job_id") or session.get("job_id") or None

    # --- every SLOW_S ----------------------------------------------------------------------------
    async def slow_round(self) -> None:
        now = time.time()
        beats, _ = await cluster_view.merged_progress(self.server.token, self.server.node_id)
        for b in beats:
            self._job(b.get("job_id") or "", now)
            if b.get("train_run") is None or b.get("world_rank") is None:
                continue
            key = (b.get("job_id") or "", b["train_run"], int(b["world_rank"]))
            times = step_table.step_times(b)
            new = {k: t for k, t in times.items() if k > self.last_step.get(key, -1)}
            if new:  # downsampled: one median per rank per round
                self.last_step[key] = max(new)
                self._to(key[0], "steps", {"train_run": key[1], "world_rank": key[2], "node_id": b.get("node_id"),
                                           "pid": b.get("pid"), "step": max(new), "steps": len(new),
                                           "busy_s": round(statistics.median(new.values()), 4),
                                           "max_s": round(max(new.values()), 4)}, now)
        await asyncio.to_thread(self.train_attempts, now)  # before the nodes: a run's job is active then
        for a in await asyncio.to_thread(registry.agents):
            node = a.get("node_id") or ""
            mem = a.get("memory") or {}
            if mem:
                self._to(None, "memory", {"node_id": node, "node_ip": a.get("node_ip"), "used": mem.get("used"),
                                          "limit": mem.get("limit")}, now)
            for job in self.active(now):
                if (job, node) not in self.nodes:
                    self.nodes.add((job, node))
                    self.out.add(job, "node", {k: a.get(k) for k in ("node_id", "node_ip", "is_head", "version",
                                                                     "ray", "python", "started_by")},
                                 record=self.record(job))
        for span in await asyncio.to_thread(self.spans.new_spans):
            self._to(spans.job_of(span) or None, "span", span, now, span.get("end"))

    def train_attempts(self, now: float) -> None:
        try:
            records = _ray_internals.train_run_records(None, 5.0)
        except Exception:
            return  # Train's state is not there (no run yet, or tracking off)
        for run in attempts.summarize(records, now):
            self.copy_to_storage(run["job_id"] or "", run)
            for a in run["attempts"]:
                key = (str(run["run_id"]), int(a["number"]))
                state = (a["status"], a["ended"], len(a["failed"]))
                if self.attempt_state.get(key) == state:
                    continue
                self.attempt_state[key] = state
                self._to(run["job_id"] or None, "attempt",
                         dict(a, run=run["run"], run_id=run["run_id"], run_status=run["status"],
                              run_ended=run["ended"], run_error=run["error"]), now)

    async def run_forever(self) -> None:
        while True:
            await asyncio.sleep(POLL_S)
            try:
                await asyncio.to_thread(self.events_and_sessions)
                if time.monotonic() >= self.next_slow:
                    self.next_slow = time.monotonic() + SLOW_S
                    await self.slow_round()
            except asyncio.CancelledError:
                raise
            except Exception:
                log.exception("raydbg: history round failed (the next one tries again)")


_TASK = web.AppKey("raydbg_history_task", asyncio.Task)
_recorder: Recorder | None = None  # this gateway's, once it records


def record_now() -> bool:
    """One round of events and sessions now, and every writer flushed: what happened since the
    last round is in the records before the cluster goes down. False when nothing is recorded
    here (not the gateway, RAYDBG_HISTORY=off, the store not opened) or a write failed."""
    rec = _recorder
    if rec is None:
        return False
    rec.events_and_sessions()
    ok = rec.out.flush()
    for copies in list(rec.copies.values()):
        for copy in list(copies.values()):
            ok = copy.flush() and ok
    return ok


def register(server: AgentServer, app: web.Application) -> None:
    """A feature of the agent (actor.FEATURES): on the gateway, every job's history is recorded for
    the life of the app (RAYDBG_HISTORY=off: not at all)."""
    if not server.is_head or store.disabled():
        return

    async def start(app: web.Application) -> None:
        try:
            out = writer.start(store.open_store())
        except Exception as exc:
            log.warning("raydbg: no history recorded: %s", exc)
            return
        global _recorder
        _recorder = Recorder(server, out)
        app[_TASK] = asyncio.create_task(_recorder.run_forever())

    async def stop(app: web.Application) -> None:
        task = app.get(_TASK)
        if task is not None:
            task.cancel()
        current = writer.current()
        if current is not None:
            await asyncio.to_thread(current.flush)

    app.on_startup.append(start)
    app.on_cleanup.append(stop)
