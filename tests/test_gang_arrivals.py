"""Collective arrival times (pure): summaries a rank keeps, clock offsets, who waited for whom, the straggler rule."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest

from raydbg import progress_records as progress
from raydbg.gang import arrival_reader, arrivals, stragglers
from raydbg.gang.arrivals import Clock, GroupArrivals, Window
from raydbg.gang.stragglers import Settings, StragglerDecider

COMPUTE = 0.1  # each rank's own work before the step's first collective


def entry(seq: int, at: float, group: str = "0", p2p: bool = False) -> dict[str, Any]:
    return {"collective_seq_id": seq, "time_created_ns": int(at * 1e9), "process_group": [group, "default_pg"],
            "is_p2p": p2p, "profiling_name": "gloo:all_reduce"}


def run(n: int = 3, steps: int = 7, late: dict[int, float] | None = None, extra: dict[int, float] | None = None,
        shift: dict[int, float] | None = None, nodes: dict[int, str] | None = None, released: bool = True,
        collectives: int = 6, lost: dict[int, set[int]] | None = None) -> list[dict[str, Any]]:
    """Progress records of a lock-step run, built the way the ranks build them: each step starts at a
    report's return (the same instant on every rank), each rank works COMPUTE (+ `extra[rank]`, + `late[step]`
    for rank 1) before the step's first collective, which releases when the last rank arrives; then
    `collectives - 1` more, entered together; then the report. Rank r's clock reads `shift[r]` ahead.
    `lost[r]`: steps whose arrivals rank r has not summarized (its reader has not read them yet)."""
    late, extra, shift, nodes, lost = late or {}, extra or {}, shift or {}, nodes or {}, lost or {}
    entries: dict[int, list[dict[str, Any]]] = {r: [] for r in range(n)}
    windows: dict[int, list[Window]] = {r: [] for r in range(n)}
    start, seq = 1000.0, 0
    for k in range(1, steps + 1):
        own = {r: COMPUTE + extra.get(r, 0.0) + (late.get(k, 0.0) if r == 1 else 0.0) for r in range(n)}
        release = start + max(own.values()) + 0.001
        for r in range(n):
            entries[r].append(entry(seq + 1, start + own[r] + shift.get(r, 0.0)))
            entries[r] += [entry(seq + 1 + c, release + 0.01 * c + shift.get(r, 0.0)) for c in range(1, collectives)]
        end = release + 0.01 * collectives
        for r in range(n):
            windows[r].append(Window(k, start + shift.get(r, 0.0), end + shift.get(r, 0.0), released))
        seq += collectives
        start = end + 0.002  # every rank arrives at the report together and leaves it together
    recs = []
    for r in range(n):
        now = start + 0.5 + shift.get(r, 0.0)
        # The newest steps read (as the reader keeps them); the last one's report has not returned yet.
        kept = {w.step: arrivals.StepArrivals(w.start, w.end, w.released, 0.0, None if w.step == steps else 0.002,
                                              arrivals.summarize(entries[r], w))
                for w in windows[r][-progress.RECENT_STEPS:] if w.step not in lost.get(r, set())}
        recs.append({"job_id": "j", "train_run": "r", "world_rank": r, "world_size": n, "node_id": nodes.get(r, "n0"),
                     "pid": 100 + r, "ts": now, "step": steps, "arr": arrivals.encode(kept, now)})
    return recs


def by_rank(recs: list[dict[str, Any]]) -> dict[int, dict[str, Any]]:
    return {int(r["world_rank"]): r for r in recs}


def group_of(col: arrivals.StepColumn, name: str) -> tuple[list[int], list[tuple[int, int]], list[list[float]]]:
    """A group's members, their (first, count) and their arrivals (own clock, s) in one step."""
    ranks, firsts, counts, rows, stamps = col.groups[name]
    return ranks, list(zip(firsts, counts, strict=True)), [[ts + t / 1000 for t in row] for row, ts in zip(rows, stamps, strict=True)]


def read_back(fields: dict[str, Any] | None, ts: float) -> dict[int, arrivals.StepColumn]:
    """The steps one rank's record fields (`arr`) carry, as the gateway reads them."""
    cols, read = arrivals.columns({0: {"ts": ts, **(fields or {})}})
    assert read == {0}, fields
    return cols


# --- what a rank keeps ---------------------------------------------------------------------------
def test_sampled_ids_are_the_same_on_every_rank_and_keep_the_first_and_last() -> None:
    assert arrivals.sampled(10, 3) == [10, 11, 12]
    assert arrivals.sampled(10, 18) == [10, 16, 21, 27]
    assert arrivals.sampled(1, 1) == [1]


def test_summarize_cuts_one_step_per_group_and_leaves_out_what_it_cannot_compare() -> None:
    got = [entry(1, 0.5), entry(2, 1.1), entry(3, 1.2), entry(4, 1.3, group="1"), entry(5, 1.4, p2p=True),
           entry(6, 1.5, group="2"), entry(8, 1.6, group="2"), entry(9, 2.5)]
    out = arrivals.summarize(got, Window(2, 1.0, 2.0, True))
    assert set(out) == {"0", "1"}  # group "2" has a gap (7 missing); p2p and other steps' entries out
    assert (out["0"].first, out["0"].count, out["0"].at) == (2, 2, {2: 1.1, 3: 1.2})
    assert out["1"] == GroupArrivals(4, 1, {4: 1.3})


def test_encoded_arrivals_travel_as_ms_before_the_record_and_come_back() -> None:
    w = Window(5, 99.5, 100.0, True)
    groups = arrivals.summarize([entry(s, 99.6 + s / 100) for s in range(1, 7)], w)
    raw = arrivals.encode({5: arrivals.StepArrivals(99.5, 100.0, True, 0.12, None, groups)}, now=100.25)
    assert raw == [[5, -750, -250, 1, 120, None, [["0", 1, 6, [-640, -620, -610, -590]]]]]  # ids 1, 3, 4, 6
    assert len(json.dumps(raw)) < 80
    back = read_back({"arr": raw}, 100.25)[5]
    assert (back.start[0], back.busy[0], back.data[0], back.sync[0]) == pytest.approx((99.5, 0.5, 0.12, None))
    assert group_of(back, "0") == ([0], [(1, 6)], [pytest.approx([99.61, 99.63, 99.64, 99.66])])
    # A malformed record is left out whole; the others are read.
    bad = {"ts": 1.0, "arr": [[1, 0, 1, 1, 0, 0, [["0", 1, 6, [1, 2]]]]]}  # 6 collectives: 4 arrivals expected
    cols, read = arrivals.columns({0: bad, 1: {"ts": 1.0, "arr": "x"}, 2: {"ts": 1.0}, 3: {"ts": 100.25, "arr": raw}})
    assert read == {3} and list(cols) == [5] and list(cols[5].busy) == [3]


# --- whom they waited for ---------------------------------------------------------------------------
def waits_of(recs: list[dict[str, Any]]) -> tuple[dict[int, dict[int, arrivals.Waits]], dict[int, Clock]]:
    ranks = by_rank(recs)
    cols, read = arrivals.columns(ranks)
    clocks = arrivals.clock_offsets(cols, read, {r: rec["node_id"] for r, rec in ranks.items()})
    return arrivals.step_waits(cols, clocks), clocks


def test_the_late_rank_held_the_others_and_they_waited_for_it() -> None:
    waits, _ = waits_of(run(extra={1: 0.35}))
    for k in range(1, 8):
        assert waits[1][k].late_s == pytest.approx(0.35, abs=0.002) and waits[1][k].waited_s < 0.002
        for r in (0, 2):
            assert waits[r][k].waited_s == pytest.approx(0.35, abs=0.002) and waits[r][k].late_s == 0


def test_a_clock_seconds_off_is_lined_up_by_the_releases() -> None:
    # Rank 2 is on another node whose clock reads 5.3 s ahead; rank 1 is the late one.
    recs = run(extra={1: 0.35}, shift={2: 5.3}, nodes={2: "far"})
    waits, clocks = waits_of(recs)
    assert clocks[2].how == "releases" and clocks[2].offset_s == pytest.approx(5.3, abs=0.001)
    assert (clocks[0].how, clocks[1].how) == ("reference", "same node")
    assert waits[1][4].late_s == pytest.approx(0.35, abs=0.002) and waits[2][4].late_s == 0
    assert waits[2][4].waited_s == pytest.approx(0.35, abs=0.002)
    # Without the offsets, rank 2 would look 5 s late at every step (what the correction is for).
    naive = arrivals.step_waits(arrivals.columns(by_rank(recs))[0], {})
    assert naive[2][4].late_s > 4.9 and naive[1][4].late_s == 0
    (found,) = StragglerDecider(Settings()).update(recs, [])
    assert found["world_rank"] == 1 and found["node_id"] == "n0"


def test_without_shared_releases_another_node_is_unchecked() -> None:
    recs = run(extra={1: 0.35}, nodes={2: "far"}, released=False)
    _, clocks = waits_of(recs)
    assert clocks[2] == Clock(0.0, "unchecked")


# --- the straggler rule on arrivals ------------------------------------------------------------------
def test_ddp_like_a_rank_late_at_every_step_is_named_though_every_work_time_is_equal() -> None:
    recs = run(extra={1: 0.35})
    cols, _ = arrivals.columns(by_rank(recs))  # lock-step: every rank's time to the report is the same
    assert all(len({round(t, 4) for t in col.busy.values()}) == 1 for col in cols.values())
    (found,) = StragglerDecider(Settings()).update(recs, [])
    assert found["world_rank"] == 1 and found["steps"] == [3, 4, 5, 6, 7]
    # Its work: 0.1 + 0.35 before the first collective, 0.06 in the others; theirs less the 0.35 waited.
    assert found["busy_s"] == [0.511] * 5 and found["others_median_s"] == [0.161] * 5
    assert found["others_waited_s"][:4] == pytest.approx([0.35] * 4, abs=0.001)  # all at the first collective
    assert found["others_waited_s"][4] is None  # step 7's report wait is not in the record yet
    text = stragglers.message(found)
    assert "rank 1 worked" in text and "the others waited 0.35s a step for it" in text, text


@pytest.mark.parametrize("case", [
    {"extra": {0: 0.35, 1: 0.35, 2: 0.35}},  # every rank slower together
    {"late": {5: 0.35}},  # one slow step
    {"late": {3: 0.35, 4: 0.35, 5: 0.35, 7: 0.35}},  # slow, but not for 5 steps running
    {"extra": {1: 0.02}},  # late at every step, by less than RAYDBG_STRAGGLER_MIN_EXTRA_S
])
def test_no_straggler(case: dict[str, Any]) -> None:
    assert StragglerDecider(Settings()).update(run(**case), []) == []


def test_a_step_not_every_rank_has_arrivals_for_is_not_judged() -> None:
    # Rank 0 has not read steps 6-7 yet: only 1-5 are common; with steps=5 that is enough, not with 6-7 only.
    recs = run(extra={1: 0.35}, lost={0: {6, 7}})
    (found,) = StragglerDecider(Settings()).update(recs, [])
    assert found["steps"] == [1, 2, 3, 4, 5]
    assert StragglerDecider(Settings()).update(run(extra={1: 0.35}, lost={0: {1, 2, 3, 6, 7}}), []) == []
    # A rank with no arrivals at all, in a run whose others have them: its step times alone
    # would count its waits as work, so the run is not judged.
    mixed = run(extra={1: 0.35})
    mixed[2] = {**{k: v for k, v in mixed[2].items() if k != "arr"}, "busy_s": [0.511] * 7}
    assert StragglerDecider(Settings()).update(mixed, []) == []


def test_steps_view_shows_both_waits() -> None:
    (view,) = stragglers.steps_view(run(extra={1: 0.35}), now=2000.0)
    rows = {r["world_rank"]: r for r in view["ranks"]}
    assert view["stragglers"] == [1] and rows[1]["straggler"]
    assert rows[1]["late_median_s"] == pytest.approx(0.35, abs=0.003) and rows[1]["wait_median_s"] < 0.01
    assert rows[0]["wait_median_s"] == pytest.approx(0.35, abs=0.002) and rows[0]["late_median_s"] == 0
    assert rows[1]["busy_median_s"] > 3 * rows[0]["busy_median_s"] and rows[0]["clock"] == "reference"
    assert rows[1]["late_s"][-1] is None and rows[1]["steps"] == [1, 2, 3, 4, 5, 6, 7]


def test_a_sync_point_alone_says_who_the_others_waited_for() -> None:
    # No collectives: rank 0 works 0.4 s, the others 0.1 s and wait 0.3 s in the report for it.
    recs = [{"job_id": "j", "train_run": "r", "world_rank": r, "node_id": "n", "pid": r, "ts": 1.0, "step": 7,
             "busy_s": [0.4 if r == 0 else 0.1] * 6, "wait_s": [0.001 if r == 0 else 0.301] * 6} for r in range(3)]
    (found,) = StragglerDecider(Settings()).update(recs, [])
    # (the newest step's report has not returned when its record is written: not known yet)
    assert found["world_rank"] == 0 and found["others_waited_s"] == [0.3] * 4 + [None]
    (view,) = stragglers.steps_view(recs, now=2.0)
    # (each wait less the report's own cost: the last rank's wait there)
    assert [r["wait_median_s"] for r in view["ranks"]] == [0.0, 0.3, 0.3]


# --- the reader in the rank -------------------------------------------------------------------------
class Ring:
    def __init__(self) -> None:
        self.entries: list[dict[str, Any]] = []
        self.reads = 0

    def __call__(self) -> list[dict[str, Any]]:
        self.reads += 1
        return list(self.entries)


def ended(k: int, period: float = 0.25, sync: tuple[int, float] | None = None) -> progress.StepEnd:
    """Step k of a loop with one step every `period` s from t=100, each ending at a report."""
    return progress.StepEnd(k, 100 + (k - 1) * period, 100 + k * period, True, True, 0.0, sync)


def test_the_reader_reads_at_the_same_steps_on_every_rank_and_keeps_the_newest() -> None:
    ring = Ring()
    reader = arrival_reader.ArrivalReader(ring, read_every_s=1.0)
    reads = []
    for k in range(1, 13):
        ring.entries.append(entry(k, 100 + (k - 1) * 0.25 + 0.1))  # one collective a step
        out = reader.on_step(ended(k, sync=(k - 1, 0.01) if k > 1 else None))
        reads.append(ring.reads)
    # Steps 1-3: no period and read cost to go by yet, read at once (cheap); then every 4th step:
    # 4 x 0.25 s spans 1 s.
    assert reads == [1, 2, 3, 4, 4, 4, 4, 5, 5, 5, 5, 6] and reader.stride() == 4
    assert out is not None
    arr = read_back(out, 103.0)
    assert sorted(arr) == [5, 6, 7, 8, 9, 10, 11, 12]  # the newest 8 read
    assert group_of(arr[12], "0") == ([0], [(12, 1)], [[pytest.approx(102.85)]]) and arr[12].sync[0] is None
    assert arr[11].sync[0] == 0.01  # step 11's report returned before step 12 ended
    out = reader.on_step(ended(13, sync=(12, 0.02)))
    arr = read_back(out, 103.25)
    assert arr[12].sync[0] == 0.02 and 13 not in arr  # known now; 13 not read


def test_the_reader_keeps_to_its_budget_and_adds_nothing_outside_a_group(monkeypatch: pytest.MonkeyPatch) -> None:
    outside = arrival_reader.ArrivalReader(lambda: None)
    assert all(outside.on_step(ended(k)) is None for k in range(1, 5))
    ring = Ring()
    reader = arrival_reader.ArrivalReader(ring, read_every_s=1.0, budget=0.01)
    clock = iter([0.0, 0.05] * 10)  # each read costs 50 ms of CPU: one every 5 s, not every 1 s
    monkeypatch.setattr(arrival_reader.time, "thread_time", lambda: next(clock))
    for k in range(1, 4):
        reader.on_step(ended(k))
    assert reader.stride() == 32  # 5 s at 0.25 s a step, rounded up to a power of two


def test_a_step_no_longer_whole_in_a_full_ring_is_left_out(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TORCH_FR_BUFFER_SIZE", "3")
    ring = Ring()
    reader = arrival_reader.ArrivalReader(ring, read_every_s=1.0)
    for k in range(1, 8):  # read at steps 1-3 and 4 (an empty ring), not 5-7
        reader.on_step(ended(k))
    ring.entries = [entry(1, 101.3), entry(2, 101.6), entry(3, 101.9)]  # full: its oldest is inside step 6
    out = reader.on_step(ended(8))
    arr = read_back(out, 102.0)
    assert sorted(arr) == [1, 2, 3, 4, 7, 8] and group_of(arr[8], "0")[1] == [(3, 1)]


def test_a_beat_carries_its_listeners_fields_and_survives_a_failing_one(tmp_path: Path,
                                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("RAYDBG_PROGRESS_BASE", str(tmp_path))
    monkeypatch.setattr(progress, "_identity", lambda: {"job_id": "j", "train_run": "r", "world_rank": 0})
    seen: list[progress.StepEnd] = []

    def listener(end: progress.StepEnd) -> dict[str, Any]:
        seen.append(end)
        return {"arr": [[end.step]]}

    def broken(end: progress.StepEnd) -> dict[str, Any]:
        raise RuntimeError("a listener's bug")

    monkeypatch.setattr(progress, "STEP_LISTENERS", [broken, listener])
    b = progress.Beat()
    b.beat(0, "train.setup", timed=False)
    b.beat(None, "train.report", sync=True)  # the first step's end: no window yet
    b.resumed()
    b.beat(None, "train.report", sync=True)
    b.resumed()
    b.beat()  # raydbg.progress(): this step started at the report's return, the next one does not
    b.beat()
    got = json.loads((progress.progress_dir() / str(os.getpid())).read_bytes())
    assert [(e.step, e.released, e.at_sync, e.last_sync is not None and e.last_sync[0]) for e in seen] == [
        (2, True, True, 1), (3, True, False, 2), (4, False, False, 2)]
    assert got["arr"] == [[4]] and len(got["busy_s"]) == 3
    # Too long for the record: the listeners' fields go first, the step times stay.
    monkeypatch.setattr(progress, "STEP_LISTENERS", [lambda end: {"arr": "x" * progress.RECORD_SIZE}])
    b.beat()
    got = json.loads((progress.progress_dir() / str(os.getpid())).read_bytes())
    assert "arr" not in got and len(got["busy_s"]) == 4
    b.done()


def test_too_few_steps_to_judge_is_not_a_catch_up() -> None:
    # Between two rounds, one rank's newest arrivals are not read yet: the run cannot be judged,
    # which must not end the episode (a second event for the same straggler).
    d = StragglerDecider(Settings())
    assert len(d.update(run(extra={1: 0.35}), [])) == 1
    assert d.update(run(extra={1: 0.35}, lost={0: {3, 4, 5, 6, 7}}), []) == []
    assert d.update(run(extra={1: 0.35}), []) == []
    assert d.update(run(), []) == []  # caught up for real
    assert len(d.update(run(extra={1: 0.35}), [])) == 1


def test_one_slow_read_does_not_set_the_pace(monkeypatch: pytest.MonkeyPatch) -> None:
    ring = Ring()
    reader = arrival_reader.ArrivalReader(ring, read_every_s=1.0, budget=0.01)
    costs = iter([0.3, 0.001, 0.002, 0.001, 0.001])  # the first read met a GC pass: 300 ms of CPU
    clock = iter(x for c in costs for x in (0.0, c))
    monkeypatch.setattr(arrival_reader.time, "thread_time", lambda: next(clock))
    for k in range(1, 9):
        reader.on_step(ended(k))
    assert ring.reads == 5 and reader.stride() == 4  # read at steps 1, 2, 3, then 4 and 8


def test_raydbg_steps_renders_both_waits_and_says_when_a_clock_is_unchecked() -> None:
    from raydbg.commands.steps import render

    runs = stragglers.steps_view(run(extra={1: 0.35}, nodes={2: "far"}, released=False), now=2000.0)
    text = render({"runs": runs}, 200)
    assert "straggler(s): rank 1" in text and "WAITED FOR OTHERS  OTHERS WAITED FOR IT" in text, text
    row1 = next(line for line in text.splitlines() if line.strip().startswith("1 *"))
    assert row1.split()[5:9] == ["0.511", "0.000", "0.000", "0.350"], row1  # work, data, waited, others waited
    assert "ranks 2: another node's clock, not lined up" in text, text
