"""A Train run's recent steps per rank (pure, on the gateway): work, waited for others, others waited for it.

From the node-merged progress records of one run (raydbg/progress_records.py). A rank
whose record carries arrivals (`arr`: it is in a torch group with Flight Recorder on,
raydbg/gang/arrivals.py) has its steps from them: each step's window, its wait for data
and at the report, and what it waited at the step's collectives and the others waited
there for it, with the clocks of other nodes lined up. Otherwise the record's lists
(`busy_s`, `wait_s`, `data_s`: its newest steps) are its steps. Where any rank of a run
carries arrivals, only the steps read from them count, on every rank: a rank's steps
without them would count its waits inside the step as work.

`work` (what straggler detection judges, every second, at thousands of ranks) is made at
once; the rest (`figures`: for `raydbg steps` and an event's details) on demand.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from raydbg.gang import arrivals

# One step of one rank: (busy, sync, data, waited, late): its time from its start to its
# arrival at the sync point (or its end); its wait in that sync point (0: none; None: not
# known yet); its wait for data (None: not recorded); its wait and the others' wait for it
# alone at the step's collectives.
Row = tuple[float, float | None, float | None, float, float]


@dataclass
class RankSteps:
    """One rank's recent steps: work (less its waits at collectives), who waited for whom."""

    work: dict[int, float]
    # None: not known yet (a report's wait is known once it returned, after the record was written)
    waited: dict[int, float | None]  # it waited for others: at the step's collectives and its sync point
    late: dict[int, float | None]  # the others waited for it alone: at the same places
    data: dict[int, float]  # of its work, waiting for data
    clock: str | None  # how its clock was lined up with the others' (arrivals.Clock.how)


def step_times(rec: dict[str, Any], field: str = "busy_s") -> dict[int, float]:
    """{step number: seconds} of one record's recent steps (the newest is `step`): their work
    time (`busy_s`), or the part of it spent waiting for data (`data_s`)."""
    times = rec.get(field)
    if not isinstance(times, list) or not times:
        return {}
    newest = int(rec.get("step") or 0)
    first = newest - len(times) + 1
    return {first + i: float(t) for i, t in enumerate(times)}


def sync_waits(rec: dict[str, Any]) -> dict[int, float]:
    """{step: seconds in the sync point that ended it}: a report's wait is recorded when it returns,
    after the record was written, so the newest is the step before `step`."""
    return {k - 1: t for k, t in step_times(rec, "wait_s").items()}


def _from_lists(rec: dict[str, Any]) -> dict[int, Row]:
    sync, data = sync_waits(rec), step_times(rec, "data_s")
    report_loop = bool(sync)
    return {k: (t, sync.get(k) if report_loop else 0.0, data.get(k), 0.0, 0.0) for k, t in step_times(rec).items()}


class RunSteps:
    """Per rank of one run: `work` by step at once, `figures()` when asked."""

    def __init__(self, ranks: dict[int, dict[str, Any]], newest: int | None = None) -> None:
        """`newest`: of the steps every rank has arrivals for, only the newest so many are read
        (what a judgement looks at: reading thousands of records is most of its cost)."""
        self._ranks = ranks
        only = None
        if newest is not None:
            numbers = [n for rec in ranks.values() if (n := arrivals.step_numbers(rec)) is not None]
            if numbers and len(numbers) == len(ranks):
                only = set(sorted(set.intersection(*(set(n) for n in numbers)))[-newest:])
        self._cols, read = arrivals.columns(ranks, only)
        self.clocks = arrivals.clock_offsets(self._cols, read, {r: ranks[r].get("node_id") for r in read})
        self._waits: dict[int, dict[int, arrivals.Waits]] | None = None
        if read:
            self._waits = waits = arrivals.step_waits(self._cols, self.clocks)
            self.work: dict[int, dict[int, float]] = {r: {} for r in ranks}
            for k, col in self._cols.items():
                for r, busy in col.busy.items():
                    self.work[r][k] = max(0.0, busy - waits[r][k].waited_s)
        else:
            self.work = {r: step_times(rec) for r, rec in ranks.items()}
        self._figures: dict[int, RankSteps] | None = None

    def figures(self) -> dict[int, RankSteps]:
        if self._figures is None:
            self._figures = self._make_figures()
        return self._figures

    def _rows(self) -> dict[int, dict[int, Row]]:
        if self._waits is None:
            return {r: _from_lists(rec) for r, rec in self._ranks.items()}
        rows: dict[int, dict[int, Row]] = {r: {} for r in self._ranks}
        for k, col in self._cols.items():
            for r, busy in col.busy.items():
                w = self._waits[r][k]
                rows[r][k] = (busy, col.sync.get(r), col.data.get(r), w.waited_s, w.late_s)
        return rows

    def _make_figures(self) -> dict[int, RankSteps]:
        rows = self._rows()
        # At a sync point that releases every rank at once, a rank's wait there less the last rank's
        # (the sync point's own cost) is what it waited for the others: their arrivals' difference.
        sync_waited: dict[int, dict[int, float]] = {r: {} for r in rows}
        sync_late: dict[int, dict[int, float]] = {r: {} for r in rows}
        for k in {k for per in rows.values() for k in per}:
            here = {r: row[1] for r, per in rows.items() if (row := per.get(k)) is not None and row[1] is not None}
            if not here:
                continue
            ordered = sorted(here, key=here.__getitem__)
            least = here[ordered[0]]
            for r, t in here.items():
                sync_waited[r][k] = t - least
            if len(ordered) > 1:
                second = here[ordered[1]]
                for r, t in here.items():
                    sync_late[r][k] = max(0.0, (second if r == ordered[0] else least) - t)
        out = {}
        for r, per in rows.items():
            out[r] = RankSteps(
                work={k: round(t, 4) for k, t in self.work[r].items()},
                waited={k: None if row[1] is None else round(row[3] + sync_waited[r].get(k, 0.0), 4)
                        for k, row in per.items()},
                late={k: None if row[1] is None else round(row[4] + sync_late[r].get(k, 0.0), 4)
                      for k, row in per.items()},
                data={k: row[2] for k, row in per.items() if row[2] is not None},
                clock=self.clocks[r].how if r in self.clocks else None)
        return out
