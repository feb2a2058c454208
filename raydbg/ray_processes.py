"""Ray's processes on a node: which of the raylet's children are not user workers, and
what a Ray process title says a worker runs.

The raylet starts workers and a few daemons as its children; Ray titles each
`ray::<what it runs>` (`ray::IDLE`, `ray::f`, `ray::Actor.method`). These are Ray's
process conventions (Ray 2.60.0), not Python APIs: stdlib and psutil only here.
"""

from __future__ import annotations

import os

import psutil

PREFIX = "ray::"
IDLE_TITLE = "IDLE"  # a worker that runs nothing now (`ray::IDLE`)
# Ray's node daemons titled like workers.
DAEMONS = frozenset({"DashboardAgent", "RuntimeEnvAgent"})
# Ray's I/O workers (object spilling, restoring, deleting), idle or busy.
IO_WORKERS = frozenset({
    "IDLE_SpillWorker", "IDLE_RestoreWorker", "IDLE_DeleteWorker",
    "SpillWorker", "RestoreWorker", "DeleteWorker",
})
AGENT = "NodeAgent"  # raydbg's own agent actor
# Ray's own processes and raydbg's agent: never a user's worker.
NOT_WORKERS = DAEMONS | IO_WORKERS | {AGENT}


def title_name(title: str) -> str | None:
    """`ray::Actor.method extra` -> `Actor.method` (`ray::IDLE` -> `IDLE`); None for a
    process not titled `ray::`."""
    if not title.startswith(PREFIX):
        return None
    return title[len(PREFIX):].split(" ", 1)[0]


def raylet_children(raylet_pid: int | None = None) -> list[psutil.Process]:
    """The raylet's children (its workers, daemons and raydbg's agent); without a pid, those
    of this process's parent (the agent and the workers run under the raylet). Raises
    psutil.Error."""
    return psutil.Process(raylet_pid or os.getppid()).children()
