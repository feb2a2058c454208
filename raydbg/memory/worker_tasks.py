"""Who is who on a node (monitor side): worker pids -> task or actor, caller, start time and retry budget.

Sources, cheapest first:
  /proc/PID/cmdline  Ray's process title: `ray::IDLE`, `ray::<task>`, `ray::<Actor>`...
  local records      task id + attempt per worker, written at task start (node_files.py)
  GCS task events    running task per worker pid (attempt, parent = caller, start time)
  GCS actor table    actor per pid with max_restarts / num_restarts
  raydbg budget KV   max_retries per function (+ per call where it differs) and caller,
                     recorded at submission (budgets.py)
`join_candidates()` joins them (pure, unit-tested); `GcsView` reads the Ray side.
"""

from __future__ import annotations

import time
from collections.abc import Iterable
from dataclasses import replace
from pathlib import Path
from typing import Any, Protocol

from raydbg import ray_processes
from raydbg.gcs_tables import ActorRow, GcsTables, TaskRow
from raydbg.memory import node_files
from raydbg.memory.kernel_files import Roots
from raydbg.memory.policy import ACTOR, IDLE, TASK, Candidate
from raydbg.memory.process_memory import ProcMem


class ClusterView(Protocol):
    def running_tasks(self, node_id: str) -> list[TaskRow]: ...

    def actors(self, node_id: str) -> list[ActorRow]: ...

    def budgets(
        self, task_ids: list[str], functions: dict[str, str] | None = None
    ) -> dict[str, dict[str, Any]]: ...

    def prior_kills(self, task_ids: list[str]) -> dict[str, int]: ...


def ray_title(pid: int, roots: Roots | None = None) -> str | None:
    """`f` for a process titled `ray::f`; None when it is not a Ray worker-style process."""
    roots = roots or Roots()
    try:
        raw = (roots.proc / str(pid) / "cmdline").read_bytes()
    except OSError:
        return None
    return ray_processes.title_name(raw.split(b"\0", 1)[0].decode(errors="replace").strip())


def titles(pids: Iterable[int], roots: Roots | None = None) -> dict[int, str]:
    out: dict[int, str] = {}
    for pid in pids:
        t = ray_title(pid, roots)
        if t is not None:
            out[pid] = t
    return out


def retries_left(max_retries: int | None, used: int) -> int | None:
    if max_retries is None:
        return None
    if max_retries < 0:
        return -1
    return max(0, max_retries - used)


def join_candidates(
    procs: dict[int, ProcMem],
    titles: dict[int, str],
    tasks: list[TaskRow],
    actors: list[ActorRow],
    budgets: dict[str, int],
    prior_kills: dict[str, int] | None = None,
    growth: dict[int, float] | None = None,
    gpu: dict[int, int] | None = None,
    protect: frozenset[int] = frozenset(),
) -> list[Candidate]:
    """Join everything known about the node's worker processes into policy candidates."""
    prior_kills = prior_kills or {}
    growth = growth or {}
    gpu = gpu or {}
    by_pid_task: dict[int, TaskRow] = {}
    for t in tasks:
        cur = by_pid_task.get(t.worker_pid)
        if cur is None or t.start_time > cur.start_time:  # newest running attempt wins
            by_pid_task[t.worker_pid] = t
    by_pid_actor = {a.pid: a for a in actors}
    out: list[Candidate] = []
    for pid, title in sorted(titles.items()):
        pm = procs.get(pid)
        if pm is None or pid in protect or title in ray_processes.NOT_WORKERS:
            continue
        common: dict[str, Any] = {
            "pid": pid,
            "memory": pm.memory,
            "growth": growth.get(pid, 0.0),
            "gpu_memory": gpu.get(pid, 0),
        }
        actor = by_pid_actor.get(pid)
        task = by_pid_task.get(pid)
        if task is not None and task.start_time + 1.0 < pm.start_time:
            task = None  # stale event from an earlier process with this pid
        if actor is not None:
            out.append(
                Candidate(
                    kind=ACTOR,
                    start_time=actor.start_time or pm.start_time,
                    owner=actor.owner or None,
                    retries_left=retries_left(actor.max_restarts, actor.num_restarts),
                    name=actor.name or actor.class_name,
                    actor_id=actor.actor_id,
                    job_id=actor.job_id,
                    prior_kills=prior_kills.get(actor.actor_id, 0),
                    **common,
                )
            )
        elif title == ray_processes.IDLE_TITLE:
            out.append(Candidate(kind=IDLE, start_time=pm.start_time, name="IDLE", **common))
        elif task is not None:
            out.append(
                Candidate(
                    kind=TASK,
                    start_time=task.start_time,
                    owner=task.parent_task_id or None,
                    retries_left=retries_left(budgets.get(task.task_id), task.attempt),
                    name=task.name or title,
                    task_id=task.task_id,
                    job_id=task.job_id,
                    attempt=task.attempt,
                    prior_kills=prior_kills.get(task.task_id, 0),
                    **common,
                )
            )
        else:
            # A worker busy with something GCS has not reported yet: unknown, so non-retriable.
            out.append(Candidate(kind=TASK, start_time=pm.start_time, name=title, **common))
    return out


class GcsView(GcsTables):
    """Who-is-who from GCS: the running tasks and actors, and the budgets recorded at submission."""

    def budgets(
        self, task_ids: list[str], functions: dict[str, str] | None = None
    ) -> dict[str, dict[str, Any]]:
        """{task id: {"max_retries", "parent", "name"}} as recorded at submission;
        `functions` (task id -> function id) finds a function's default."""
        from raydbg.memory import budgets

        return budgets.lookup(task_ids, functions)

    def prior_kills(self, task_ids: list[str]) -> dict[str, int]:
        from raydbg.memory import budgets

        return budgets.killed_counts(task_ids)


def node_id_of_self() -> str:
    """This node's Ray node id when connected; '' otherwise (no node filter)."""
    try:
        import ray

        return str(ray.get_runtime_context().get_node_id())
    except Exception:
        return ""


def merge_local(
    tasks: list[TaskRow], recs: dict[int, dict[str, Any]], titles: dict[int, str], node_id: str
) -> list[TaskRow]:
    """Add the locally recorded running task of each worker GCS has not caught up with."""
    newest: dict[int, TaskRow] = {}
    for t in tasks:
        if t.worker_pid not in newest or t.start_time > newest[t.worker_pid].start_time:
            newest[t.worker_pid] = t
    out = list(tasks)
    for pid, r in recs.items():
        title = titles.get(pid, "")
        if title == ray_processes.IDLE_TITLE or not node_files.matches_title(str(r.get("name", "")), title):
            continue  # stale: the worker has moved on to something else
        g = newest.get(pid)
        if g is not None and g.task_id == r.get("task_id"):
            continue  # GCS knows it (and knows the caller)
        if g is not None and g.start_time > r["start"] + 0.5:
            continue  # GCS knows a later task of this worker: the record is stale
        # (The record's start may be up to a gate ticket old: _ray_internals.gate_task_functions.)
        out.append(
            TaskRow(
                str(r["task_id"]), int(r["attempt"]), str(r.get("name", "")),
                str(r.get("job_id", "")), "", pid, node_id, float(r["start"]),
            )
        )  # fmt: skip
    return out


class Resolver:
    """`Who` for the monitor: /proc titles + local records + a ClusterView (+ NVML).

    Degrades to titles alone when GCS cannot be reached.
    """

    def __init__(
        self,
        view: ClusterView | None,
        node_id: str = "",
        protect: Iterable[int] = (),
        roots: Roots | None = None,
        gpu: Any = None,
        run_dir: Path | None = None,
    ) -> None:
        self.view = view
        self.node_id = node_id
        self.protect = frozenset(protect)
        self.roots = roots or Roots()
        self.gpu = gpu  # a GpuReader or None
        self.run_dir = run_dir
        self.errors = 0
        self.held: set[int] = set()
        self._pruned = time.monotonic()

    def candidates(self, procs: dict[int, ProcMem], growth: dict[int, float]) -> list[Candidate]:
        ti = titles(procs, self.roots)
        workers = {p for p, t in ti.items() if t not in ray_processes.NOT_WORKERS and p not in self.protect}
        if not workers:
            return []
        tasks: list[TaskRow] = []
        actors: list[ActorRow] = []
        budgets: dict[str, int] = {}
        kills: dict[str, int] = {}
        recs = node_files.read_running(sorted(workers), self.run_dir)
        # Held at start by the gate: nothing to free there, and a kill would burn a retry.
        held = {
            p
            for p, r in recs.items()
            if r.get("held") and node_files.matches_title(str(r.get("name", "")), ti.get(p))
        }
        workers -= held
        self.held = held
        recs = {p: r for p, r in recs.items() if p in workers}
        if time.monotonic() - self._pruned > 60:
            self._pruned = time.monotonic()
            node_files.prune(self.run_dir, self.roots.proc)
        if self.view is not None:
            try:
                rows = self.view.running_tasks(self.node_id)
                tasks = [t for t in rows if t.worker_pid in workers]
                actors = [a for a in self.view.actors(self.node_id) if a.pid in workers]
            except Exception:
                # GCS unreachable: only what workers recorded locally is known.
                self.errors += 1
        tasks = merge_local(tasks, recs, ti, self.node_id)
        if self.view is not None:
            try:
                tids = [t.task_id for t in tasks]
                fns = {str(r.get("task_id")): str(r.get("fn") or "") for r in recs.values()}
                records = self.view.budgets(tids, fns)
                budgets = {t: int(r["max_retries"]) for t, r in records.items()}
                # The submitter recorded the caller: fill it in where GCS has not yet.
                tasks = [
                    t
                    if t.parent_task_id
                    else replace(
                        t, parent_task_id=str(records.get(t.task_id, {}).get("parent") or "")
                    )
                    for t in tasks
                ]
                kills = self.view.prior_kills(tids + [a.actor_id for a in actors])
            except Exception:
                self.errors += 1
        gpu: dict[int, int] = {}
        if self.gpu is not None:
            g = self.gpu.read()
            gpu = g.per_pid if g is not None else {}
        ti = {p: t for p, t in ti.items() if p not in held}
        out = join_candidates(procs, ti, tasks, actors, budgets, kills, growth, gpu, self.protect)
        # The function of each task the gate recorded: joins its learned peak (monitor.py).
        fn_of = {p: str(r["fn"]) for p, r in recs.items() if r.get("fn")}
        return [
            replace(c, function_id=fn_of[c.pid])
            if c.pid in fn_of and c.task_id == recs[c.pid].get("task_id")
            else c
            for c in out
        ]
