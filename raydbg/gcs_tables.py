"""Running tasks and alive actors per node, read from GCS through the Ray adapter (no dashboard needed)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from raydbg import _ray_internals

RUNNING_STATES = frozenset({8, 9, 10})  # RUNNING, RUNNING_IN_RAY_GET, RUNNING_IN_RAY_WAIT
DONE_STATES = frozenset({11, 12})  # FINISHED, FAILED
NORMAL_TASK = 0


@dataclass(frozen=True)
class TaskRow:
    task_id: str
    attempt: int
    name: str
    job_id: str
    parent_task_id: str
    worker_pid: int
    node_id: str
    start_time: float  # epoch s of RUNNING
    type: int = NORMAL_TASK


@dataclass(frozen=True)
class ActorRow:
    actor_id: str
    pid: int
    class_name: str
    name: str
    job_id: str
    owner: str  # owner worker id (hex)
    max_restarts: int
    num_restarts: int
    node_id: str
    start_time: float


def _hex(b: bytes) -> str:
    return b.hex()


class GcsTables:
    """The Ray side of who-is-who: running tasks and alive actors.

    Pass a `GlobalState` (`_ray_internals.gcs_state(address)` in a standalone process);
    None: this connected process's.
    """

    def __init__(self, state: Any = None) -> None:
        self._state = state if state is not None else _ray_internals.gcs_state()

    def ended_jobs(self) -> list[str]:
        """Hex ids of the jobs Ray's job table says have ended (its `IsDead` rows)."""
        return [str(row["JobID"]) for row in self._state.job_table() if row.get("IsDead")]

    def running_tasks(self, node_id: str) -> list[TaskRow]:
        rows: list[TaskRow] = []
        for ev in _ray_internals.all_task_events(self._state):
            su = ev.state_updates
            ts = dict(su.state_ts_ns)
            if not ts or ev.task_info.type not in (0, 1, 2) or DONE_STATES & ts.keys():
                continue
            if not RUNNING_STATES & ts.keys():
                continue
            ran_on = _hex(su.node_id) or _hex(ev.task_info.node_id)
            if node_id and ran_on and ran_on != node_id:
                continue
            rows.append(
                TaskRow(
                    task_id=_hex(ev.task_id),
                    attempt=int(ev.attempt_number),
                    name=ev.task_info.name,
                    job_id=_hex(ev.job_id),
                    parent_task_id=_hex(ev.task_info.parent_task_id),
                    worker_pid=int(su.worker_pid),
                    node_id=ran_on,
                    start_time=min(ts[s] for s in RUNNING_STATES & ts.keys()) / 1e9,
                    type=int(ev.task_info.type),
                )
            )
        return rows

    def actors(self, node_id: str) -> list[ActorRow]:
        rows: list[ActorRow] = []
        for d in _ray_internals.alive_actor_rows(self._state):
            nid = _hex(d.address.node_id) or _hex(d.node_id)
            if node_id and nid and nid != node_id:
                continue
            rows.append(
                ActorRow(
                    actor_id=_hex(d.actor_id),
                    pid=int(d.pid),
                    class_name=d.class_name,
                    name=d.name,
                    job_id=_hex(d.job_id),
                    owner=_hex(d.owner_address.worker_id),
                    max_restarts=int(d.max_restarts),
                    num_restarts=int(d.num_restarts),
                    node_id=nid,
                    start_time=d.start_time / 1000.0 if d.start_time else 0.0,
                )
            )
        return rows
