"""Hang decisions (pure): from progress beats and paused sessions, which runs hang now, once per stall.

A run is a Ray Train run (job, run name) or, for other jobs that call `raydbg.progress()`,
the job. It hangs when none of its ranks made progress for `hang_after` seconds. Time
spent paused by raydbg does not count (a session listed for the run restarts the clock
when it goes), a slow run that still beats never hangs, and a stall gets one event: the
next one needs progress first. The service that feeds this and records the events is
raydbg/gang/hang_service.py.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

DEFAULT_HANG_AFTER_S = 300.0

RunKey = tuple[str, str]  # (job_id, train_run or "")


def hang_after_s() -> float:
    try:
        value = float(os.environ.get("RAYDBG_HANG_AFTER_S", "") or DEFAULT_HANG_AFTER_S)
    except ValueError:
        return DEFAULT_HANG_AFTER_S
    return value if value > 0 else DEFAULT_HANG_AFTER_S


def check_every_s(hang_after: float) -> float:
    """Often enough to fire within a quarter of the threshold, at most every 10 s."""
    return max(0.5, min(10.0, hang_after / 4))


def run_key(rec: dict[str, Any]) -> RunKey:
    """Of a progress record or a session record (sessions call it train_run too)."""
    return (str(rec.get("job_id") or ""), str(rec.get("train_run") or ""))


@dataclass
class _RunState:
    last_progress: float = 0.0  # newest beat of any rank
    last_paused: float = 0.0  # last time a raydbg session of the run was listed
    fired_at: float | None = None  # last_progress value the event was for
    last_seen: float = 0.0
    ranks: dict[str, dict[str, Any]] = field(default_factory=dict)


class HangDecider:
    """Feed it the node-merged beats and the session list each round; it returns new hangs."""

    def __init__(self, hang_after: float) -> None:
        self.hang_after = hang_after
        self.runs: dict[RunKey, _RunState] = {}

    def update(self, beats: Iterable[dict[str, Any]], sessions: Iterable[dict[str, Any]], now: float,
               still_running: Callable[[RunKey, list[dict[str, Any]]], bool] | None = None,
               ) -> list[dict[str, Any]]:
        seen: dict[RunKey, list[dict[str, Any]]] = {}
        for rec in beats:
            seen.setdefault(run_key(rec), []).append(rec)
        paused = {run_key(s) for s in sessions}
        # Runs whose workers are gone (finished, failed) are forgotten; not at once, so that
        # a node that missed one round does not make a stall fire twice.
        for k, st in list(self.runs.items()):
            if k not in seen and now - st.last_seen > self.hang_after:
                del self.runs[k]
        out = []
        for k, recs in seen.items():
            st = self.runs.setdefault(k, _RunState())
            st.last_seen = now
            newest = max(float(r.get("ts", 0)) for r in recs)
            if newest > st.last_progress:
                st.last_progress = newest
                st.fired_at = None  # progress again: a later stall is a new one
            if k in paused:
                st.last_paused = now
                continue
            quiet_since = max(st.last_progress, st.last_paused)
            if now - quiet_since < self.hang_after or st.fired_at is not None:
                continue
            if still_running is not None and not still_running(k, recs):
                continue
            st.fired_at = st.last_progress
            out.append(_hang(k, recs, now, quiet_since))
        return out


def _hang(k: RunKey, recs: list[dict[str, Any]], now: float, quiet_since: float) -> dict[str, Any]:
    ranks = sorted(
        ({"world_rank": r.get("world_rank"), "pid": r.get("pid"), "node_id": r.get("node_id"),
          "step": r.get("step"), "last_progress_s": round(now - float(r.get("ts", 0)), 1)} for r in recs),
        key=lambda r: (r["world_rank"] is None, r["world_rank"] or 0, r["pid"] or 0),
    )
    sizes = [int(r["world_size"]) for r in recs if r.get("world_size")]
    return {
        "job_id": k[0],
        "train_run": k[1] or None,
        "world_size": max(sizes) if sizes else None,
        "stalled_for_s": round(now - quiet_since, 1),
        "ranks": ranks,
    }


def message(hang: dict[str, Any]) -> str:
    n = len(hang["ranks"])
    if hang.get("train_run"):
        what, seen = f"Train run {hang['train_run']} (job {hang['job_id']})", f"{n} rank(s) seen"
    else:
        what, seen = f"job {hang['job_id']}", f"{n} worker(s) calling raydbg.progress() seen"
    return f"{what} made no progress for {hang['stalled_for_s']:.0f}s ({seen})"
