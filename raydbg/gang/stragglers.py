"""Per-rank step times and straggler decisions (pure): which rank keeps the others waiting, step after step.

The input is the node-merged progress records (raydbg/progress_records.py): each rank's
record carries, for its recent steps, the work time (`busy_s`, from the end of one sync
point to the arrival at the next), the part of it spent waiting for data (`data_s`: Ray
Data's batch iterators, `raydbg.data_wait()`), the time in the sync point itself (`wait_s`)
and, in a torch group with Flight Recorder on, its arrival times at the step's collectives
(`arr`, raydbg/gang/arrivals.py). Steps line up across ranks by number.

A rank's *work* in a step is its work time less what it waited at the step's collectives
for later ranks: in DDP or FSDP the others wait for a late rank inside their own step
(the gradient all_reduce, the all_gathers), so their work times alone look the same. A
rank straggles when, for each of the last `steps` steps every rank has recorded (with
arrivals on every rank, or on none), its work is above `factor` x the median of the
others' and at least `min_extra_s` longer. That leaves out a uniform slowdown (the median
rises with it), a single slow step, and steps too short to tell apart. Per rank and step,
"waited for others" (its wait at the step's collectives and at the sync point) and
"others waited for it" (the others' wait at them for it alone) show who holds whom. A
paused run is not judged (a rank paused by raydbg is slow by design). One event per
straggling rank until it catches up: slow in none of the last `steps` steps. The service
that feeds this and records the events is raydbg/gang/hang_service.py.
"""

from __future__ import annotations

import bisect
import os
import statistics
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from raydbg import progress_records
from raydbg.gang.step_table import RankSteps, RunSteps, step_times

__all__ = ["RankSteps", "RunSteps", "Settings", "StragglerDecider", "describe", "judge", "message", "step_times",
           "steps_view"]

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


def data_split(steps: dict[int, RankSteps], rank: int, last: list[int]) -> dict[str, float] | None:
    """Where a straggler's work went over the steps `last`: its median wait for data and compute,
    and the others' (medians over ranks of their medians); None without data marks."""
    def medians(r: int) -> tuple[float, float] | None:
        work, data = steps[r].work, steps[r].data
        if not all(s in data and s in work for s in last):
            return None
        return (statistics.median(data[s] for s in last),
                statistics.median(max(0.0, work[s] - data[s]) for s in last))

    mine = medians(rank)
    others = [m for r in steps if r != rank and (m := medians(r)) is not None]
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


def judged_steps(work: dict[int, dict[int, float]], settings: Settings) -> list[int]:
    """The last `settings.steps` steps every rank has work for; [] when there are fewer (nothing to judge yet)."""
    if len(work) < 2:
        return []
    common = set.intersection(*(set(w) for w in work.values()))
    last = sorted(common)[-settings.steps:]
    return last if len(last) == settings.steps else []


def _slow_steps(run: RunSteps, settings: Settings) -> tuple[list[int], dict[int, tuple[list[float], list[bool]]]]:
    """The last common steps, and per rank the others' median work and whether it was slow
    (above `factor` x that median and at least `min_extra_s` longer) in each of them."""
    times = run.work
    last = judged_steps(times, settings)
    if not last:
        return [], {}
    by_step = {step: sorted(t[step] for t in times.values()) for step in last}
    out = {}
    for rank, mine in times.items():
        medians = [median_without(by_step[step], mine[step]) for step in last]
        slow = [mine[step] > settings.factor * med and mine[step] - med >= settings.min_extra_s
                for step, med in zip(last, medians, strict=True)]
        out[rank] = (medians, slow)
    return last, out


def judge(ranks: dict[int, dict[str, Any]], settings: Settings, run: RunSteps | None = None) -> dict[int, dict[str, Any]]:
    """The ranks that straggle over the last `settings.steps` common steps, with their work against the
    others' (`describe` adds the rest, for an event)."""
    if len(ranks) < 2:
        return {}
    run = RunSteps(ranks, newest=settings.steps) if run is None else run
    return _stragglers(run, *_slow_steps(run, settings))


def _stragglers(run: RunSteps, last: list[int], compared: dict[int, tuple[list[float], list[bool]]]
                ) -> dict[int, dict[str, Any]]:
    found = {}
    for rank, (medians, slow) in compared.items():
        if all(slow):
            mine = run.work[rank]
            found[rank] = {
                "steps": last,
                "busy_s": [round(mine[step], 4) for step in last],
                "others_median_s": [round(m, 4) for m in medians],
                "ratio": round(statistics.median(mine[step] / m if m > 0 else float("inf")
                                                 for step, m in zip(last, medians, strict=True)), 2),
            }
    return found


def describe(run: RunSteps, rank: int, last: list[int]) -> dict[str, Any]:
    """A straggler's figures besides its work: the others' wait for it per step, its clock, its data split."""
    figures = run.figures()
    return {"others_waited_s": [figures[rank].late.get(step) for step in last], "clock": figures[rank].clock,
            "data": data_split(figures, rank, last)}


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
            steps = RunSteps(ranks, newest=self.settings.steps)
            last, compared = _slow_steps(steps, self.settings)
            if not last:
                # Too few steps every rank has figures for (arrivals not read yet on one): not a catch-up.
                still |= {k for k in self.flagged if k[0] == run}
                continue
            # Caught up: slow in none of the last steps (one step of another rank descheduled under
            # load is not a new episode). A rank missing from this round (its node's answer late) has not.
            back = {rank for rank, (_, slow) in compared.items() if not any(slow)}
            still |= {k for k in self.flagged if k[0] == run and k[1] not in back}
            for rank, figures in _stragglers(steps, last, compared).items():
                still.add((run, rank))
                if (run, rank) in self.flagged:
                    continue
                rec = ranks[rank]
                out.append({"job_id": run[0], "train_run": run[1], "world_rank": rank,
                            "world_size": rec.get("world_size"), "node_id": rec.get("node_id"),
                            "pid": rec.get("pid"), "factor": self.settings.factor, **figures,
                            **describe(steps, rank, figures["steps"])})
        self.flagged = still  # a rank that caught up (or whose run ended) may be named again
        return out


def _median(values: list[float | None]) -> float | None:
    known = [v for v in values if v is not None]
    return round(statistics.median(known), 4) if known else None


def message(found: dict[str, Any]) -> str:
    mine = statistics.median(found["busy_s"])
    others = statistics.median(found["others_median_s"])
    text = (f"Train run {found['train_run']} (job {found['job_id']}): rank {found['world_rank']} worked "
            f"{found['ratio']}x as long as the others' median for the last {len(found['steps'])} steps "
            f"({mine:.2f}s vs {others:.2f}s a step)")
    held = _median([t for t in found.get("others_waited_s") or [] if t is not None]) or 0.0
    if held > 0:
        text += f"; the others waited {held:.2f}s a step for it"
    split = found.get("data")
    if split:
        extra_data = split["data_wait_s"] - split["others_data_wait_s"]
        extra_compute = split["compute_s"] - split["others_compute_s"]
        where = "waiting for data" if extra_data > extra_compute else "computing"
        text += (f"; the extra time goes {where}: data wait {split['data_wait_s']:.2f}s vs "
                 f"{split['others_data_wait_s']:.2f}s, compute {split['compute_s']:.2f}s vs {split['others_compute_s']:.2f}s")
    return text


def steps_view(beats: Iterable[dict[str, Any]], now: float, job: str | None = None, run: str | None = None,
               settings: Settings | None = None, named: set[tuple[RunKey, int]] | None = None) -> list[dict[str, Any]]:
    """`raydbg steps` / /api/v1/steps: per Train run, one row per rank with its recent steps: work
    (`busy_s`), waited for others (`wait_s`), others waited for it (`late_s`), data wait (`data_s`).
    A straggler: judged so over the last steps now, or `named` (by an event, not caught up since).
    Each run a schema.StepsRun."""
    from raydbg import schema, validate

    settings = settings or Settings.from_env()
    out = []
    for (job_id, name), ranks in sorted(train_ranks(beats).items()):
        if (job and job != job_id) or (run and run != name):
            continue
        steps = RunSteps(ranks)
        slow = set(judge(ranks, settings, steps)) | {r for (k, r) in named or () if k == (job_id, name) and r in ranks}
        figures = steps.figures()
        rows = []
        for rank, rec in sorted(ranks.items()):
            st = figures[rank]
            order = sorted(st.work)
            lists: dict[str, list[float | None]] = {
                "busy_s": [st.work[k] for k in order], "wait_s": [st.waited[k] for k in order],
                "late_s": [st.late[k] for k in order], "data_s": [st.data.get(k) for k in order]}
            rows.append({"world_rank": rank, "node_id": rec.get("node_id"), "pid": rec.get("pid"),
                         "step": rec.get("step"), "last_progress_s": round(max(0.0, now - float(rec.get("ts", 0))), 1),
                         "steps": order, **lists, **{f"{k[:-2]}_median_s": _median(v) for k, v in lists.items()},
                         "clock": st.clock, "straggler": rank in slow})
        out.append(validate.check(schema.StepsRun, {"job_id": job_id, "train_run": name, "ranks": rows,
                                                     "stragglers": sorted(slow), "factor": settings.factor,
                                                     "steps": settings.steps}, fill=False))
    return out
