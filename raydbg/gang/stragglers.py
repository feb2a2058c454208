"""Per-rank step times and straggler decisions (pure): which rank keeps working longer than the others.

The input is the node-merged progress records (raydbg/progress_records.py): each rank's
record carries the work time of its recent steps (`busy_s`, from the end of one sync point
to the arrival at the next), the part of it spent waiting for data (`data_s`: Ray Data's
batch iterators, `raydbg.data_wait()`) and the step number of the newest. Steps line up across ranks
by number. A rank straggles when, for each of the last `steps` steps that every rank has
recorded, its work time is above `factor` x the median of the others' and at least
`min_extra_s` longer. That leaves out a uniform slowdown (the median rises with it), a
single slow step, and steps too short to tell apart. A paused run is not judged (a rank
paused by raydbg is slow by design). One event per straggling rank until it catches up.
The service that feeds this and records the events is raydbg/gang/hang_service.py.
"""

from __future__ import annotations

import bisect
import os
import statistics
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from raydbg import progress_records

RunKey = tuple[str, str]  # (job_id, train_run)


@dataclass(frozen=True)
class Settings:
    factor: float = 1.5
    steps: int = 5
    min_extra_s: float = 0.05

    @classmethod
    def from_env(cls, env: dict[str, str] | None = None) -> Settings:
        env = dict(os.environ) if env is None else env
        d = cls()

        def read(name: str, default: float, low: float) -> float:
            try:
                value = float(env.get(name, "") or default)
            except ValueError:
                return default
            return value if value >= low else default

        steps = int(read("RAYDBG_STRAGGLER_STEPS", d.steps, 1))
        return cls(factor=read("RAYDBG_STRAGGLER_FACTOR", d.factor, 1.0),
                   steps=min(steps, progress_records.RECENT_STEPS),
                   min_extra_s=read("RAYDBG_STRAGGLER_MIN_EXTRA_S", d.min_extra_s, 0.0))


def step_times(rec: dict[str, Any], field: str = "busy_s") -> dict[int, float]:
    """{step number: seconds} of one record's recent steps (the newest is `step`): their work
    time (`busy_s`), or the part of it spent waiting for data (`data_s`)."""
    times = rec.get(field)
    if not isinstance(times, list) or not times:
        return {}
    newest = int(rec.get("step") or 0)
    first = newest - len(times) + 1
    return {first + i: float(t) for i, t in enumerate(times)}


def data_split(ranks: dict[int, dict[str, Any]], rank: int, steps: list[int]) -> dict[str, float] | None:
    """Where a straggler's work time went over `steps`: its median wait for data and compute,
    and the others' (medians over ranks of their medians); None without data marks."""
    def medians(r: int) -> tuple[float, float] | None:
        busy, data = step_times(ranks[r]), step_times(ranks[r], "data_s")
        if not all(s in data and s in busy for s in steps):
            return None
        return (statistics.median(data[s] for s in steps),
                statistics.median(busy[s] - data[s] for s in steps))

    mine = medians(rank)
    others = [m for r in ranks if r != rank and (m := medians(r)) is not None]
    if mine is None or not others or (mine[0] == 0 and all(o[0] == 0 for o in others)):
        return None  # no step of any rank waited in a marked data wait: nothing to split
    return {"data_wait_s": round(mine[0], 4), "compute_s": round(mine[1], 4),
            "others_data_wait_s": round(statistics.median(o[0] for o in others), 4),
            "others_compute_s": round(statistics.median(o[1] for o in others), 4)}


def train_ranks(beats: Iterable[dict[str, Any]]) -> dict[RunKey, dict[int, dict[str, Any]]]:
    """Each Train run's newest record per world rank."""
    out: dict[RunKey, dict[int, dict[str, Any]]] = {}
    for rec in progress_records.latest(list(beats)).values():
        if rec.get("train_run") is None or rec.get("world_rank") is None:
            continue
        run = (str(rec.get("job_id") or ""), str(rec["train_run"]))
        out.setdefault(run, {})[int(rec["world_rank"])] = rec
    return out


def median_without(ordered: list[float], value: float) -> float:
    """The median of `ordered` (sorted) less one occurrence of `value`, in O(log n): at 4,096
    ranks, a median of the others per rank would be quadratic."""
    i = bisect.bisect_left(ordered, value)
    n = len(ordered) - 1

    def at(j: int) -> float:  # the j-th of the list without index i
        return ordered[j if j < i else j + 1]

    return at(n // 2) if n % 2 else (at(n // 2 - 1) + at(n // 2)) / 2


def judge(ranks: dict[int, dict[str, Any]], s: Settings) -> dict[int, dict[str, Any]]:
    """The ranks that straggle over the last `s.steps` common steps, with the figures that show it."""
    if len(ranks) < 2:
        return {}
    times = {rank: step_times(rec) for rank, rec in ranks.items()}
    common = set.intersection(*(set(t) for t in times.values()))
    last = sorted(common)[-s.steps:]
    if len(last) < s.steps:
        return {}
    by_step = {step: sorted(t[step] for t in times.values()) for step in last}
    found = {}
    for rank, mine in times.items():
        medians = [median_without(by_step[step], mine[step]) for step in last]
        if all(mine[step] > s.factor * med and mine[step] - med >= s.min_extra_s
               for step, med in zip(last, medians, strict=True)):
            found[rank] = {
                "steps": last,
                "busy_s": [mine[step] for step in last],
                "others_median_s": [round(m, 4) for m in medians],
                "ratio": round(statistics.median(mine[step] / m if m > 0 else float("inf")
                                                 for step, m in zip(last, medians, strict=True)), 2),
                "data": data_split(ranks, rank, last),
            }
    return found


class StragglerDecider:
    """Feed it the merged beats and the session list each round; it returns new stragglers."""

    def __init__(self, settings: Settings | None = None) -> None:
        self.settings = settings or Settings.from_env()
        self.flagged: set[tuple[RunKey, int]] = set()

    def update(self, beats: Iterable[dict[str, Any]], sessions: Iterable[dict[str, Any]]) -> list[dict[str, Any]]:
        paused = {(str(s.get("job_id") or ""), str(s.get("train_run") or "")) for s in sessions}
        out = []
        still: set[tuple[RunKey, int]] = set()
        for run, ranks in train_ranks(beats).items():
            if run in paused:
                still |= {k for k in self.flagged if k[0] == run}  # judged again once it runs
                continue
            for rank, figures in judge(ranks, self.settings).items():
                still.add((run, rank))
                if (run, rank) in self.flagged:
                    continue
                rec = ranks[rank]
                out.append({"job_id": run[0], "train_run": run[1], "world_rank": rank,
                            "world_size": rec.get("world_size"), "node_id": rec.get("node_id"),
                            "pid": rec.get("pid"), "factor": self.settings.factor, **figures})
        self.flagged = still  # a rank that caught up (or whose run ended) may be flagged again
        return out


def message(found: dict[str, Any]) -> str:
    mine = statistics.median(found["busy_s"])
    others = statistics.median(found["others_median_s"])
    text = (f"Train run {found['train_run']} (job {found['job_id']}): rank {found['world_rank']} worked "
            f"{found['ratio']}x as long as the others' median for the last {len(found['steps'])} steps "
            f"({mine:.2f}s vs {others:.2f}s a step)")
    split = found.get("data")
    if split:
        extra_data = split["data_wait_s"] - split["others_data_wait_s"]
        extra_compute = split["compute_s"] - split["others_compute_s"]
        where = "waiting for data" if extra_data > extra_compute else "computing"
        text += (f"; the extra time goes {where}: data wait {split['data_wait_s']:.2f}s vs "
                 f"{split['others_data_wait_s']:.2f}s, compute {split['compute_s']:.2f}s vs {split['others_compute_s']:.2f}s")
    return text


def steps_view(beats: Iterable[dict[str, Any]], now: float, job: str | None = None, run: str | None = None,
               settings: Settings | None = None) -> list[dict[str, Any]]:
    """`raydbg steps` / /api/v1/steps: per Train run, one row per rank with its recent step times."""
    settings = settings or Settings.from_env()
    out = []
    for (job_id, name), ranks in sorted(train_ranks(beats).items()):
        if (job and job != job_id) or (run and run != name):
            continue
        slow = judge(ranks, settings)
        rows = []
        for rank, rec in sorted(ranks.items()):
            busy = [float(t) for t in rec.get("busy_s") or []]
            wait = [float(t) for t in rec.get("wait_s") or []]
            data = [float(t) for t in rec.get("data_s") or []]
            rows.append({"world_rank": rank, "node_id": rec.get("node_id"), "pid": rec.get("pid"),
                         "step": rec.get("step"), "last_progress_s": round(max(0.0, now - float(rec.get("ts", 0))), 1),
                         "busy_s": busy, "wait_s": wait, "data_s": data,
                         "busy_median_s": round(statistics.median(busy), 4) if busy else None,
                         "wait_median_s": round(statistics.median(wait), 4) if wait else None,
                         "data_median_s": round(statistics.median(data), 4) if data else None,
                         "straggler": rank in slow})
        out.append({"job_id": job_id, "train_run": name, "ranks": rows,
                    "stragglers": sorted(slow), "factor": settings.factor, "steps": settings.steps})
    return out
