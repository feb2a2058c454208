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
    busy: dict[int, list[float]] = {r: [] for r in range(n)}
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
            busy[r].append(round(end - start, 4))
        seq += collectives
        start = end + 0.002  # every rank arrives at the report together and leaves it together
    recs = []
    for r in range(n):
        now = start + 0.5 + shift.get(r, 0.0)
        kept = [(w, arrivals.summarize(entries[r], w)) for w in windows[r] if w.step not in lost.get(r, set())]
        recs.append({"job_id": "j", "train_run": "r", "world_rank": r, "world_size": n, "node_id": nodes.get(r, "n0"),
                     "pid": 100 + r, "ts": now, "step": steps, "busy_s": busy[r][-progress.RECENT_STEPS:],
                     "wait_s": [0.002] * min(steps - 1, progress.RECENT_STEPS), "arr": arrivals.encode(kept, now)})
    return recs


def by_rank(recs: list[dict[str, Any]]) -> dict[int, dict[str, Any]]:
    return {int(r["world_rank"]): r for r in recs}


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
    raw = arrivals.encode([(w, groups)], now=100.25)
    assert raw == [[5, -750, 1, [["0", 1, 6, [-640, -620, -610, -590]]]]]  # ids 1, 3, 4, 6
    assert len(json.dumps(raw)) < 60
    back = arrivals.decode({"ts": 100.25, "arr": raw})
    assert back is not None and back[5].start == pytest.approx(99.5) and back[5].released
    assert back[5].groups["0"].at == pytest.approx({1: 99.61, 3: 99.63, 4: 99.64, 6: 99.66})
    assert arrivals.decode({"ts": 1.0, "arr": [[1, 0, 1, [["0", 1, 6, [1, 2]]]]]}) is None  # 4 expected
    assert arrivals.decode({"ts": 1.0, "arr": "x"}) is None and arrivals.decode({"ts": 1.0}) is None


# --- whom they waited for ---------------------------------------------------------------------------
def waits_of(recs: list[dict[str, Any]]) -> tuple[dict[int, dict[int, arrivals.Waits]], dict[int, Clock]]:
    ranks = by_rank(recs)
    decoded = {r: d for r, rec in ranks.items() if (d := arrivals.decode(rec)) is not None}
    clocks = arrivals.clock_offsets(decoded, {r: rec["node_id"] for r, rec in ranks.items()})
    return arrivals.step_waits(decoded, clocks), clocks


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
    ranks = by_rank(recs)
    decoded = {r: d for r, rec in ranks.items() if (d := arrivals.decode(rec)) is not None}
    naive = arrivals.step_waits(decoded, {})
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
    assert len({tuple(r["busy_s"]) for r in recs}) == 1  # lock-step: the old reading sees nothing
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


def test_the_reader_reads_at_most_every_interval_and_summarizes_each_step_once(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TORCH_FR_BUFFER_SIZE", "5")
    ring, mono = Ring(), [0.0]
    reader = arrival_reader.ArrivalReader(ring, read_every_s=1.0, clock=lambda: mono[0])
    ring.entries = [entry(1, 10.5), entry(2, 10.6)]
    out = reader.on_step(1, 10.0, 11.0, True, 11.0)
    assert ring.reads == 1 and out == {"arr": [[1, -1000, 1, [["0", 1, 2, [-500, -400]]]]]}
    ring.entries += [entry(3, 11.5)]
    mono[0] = 0.5
    out = reader.on_step(2, 11.0, 12.0, True, 12.0)
    assert ring.reads == 1 and out == {"arr": [[1, -2000, 1, [["0", 1, 2, [-1500, -1400]]]]]}  # not read yet
    ring.entries = [entry(2, 10.6), entry(3, 11.5), entry(4, 12.5), entry(5, 12.6), entry(6, 12.7)]  # full
    mono[0] = 1.0
    out = reader.on_step(3, 12.0, 13.0, True, 13.0)
    assert ring.reads == 2
    assert out == {"arr": [[1, -3000, 1, [["0", 1, 2, [-2500, -2400]]]], [2, -2000, 1, [["0", 3, 1, [-1500]]]],
                           [3, -1000, 1, [["0", 4, 3, [-500, -400, -300]]]]]}
    # A step whose window starts before the oldest entry of a full ring is lost, not summarized short.
    ring.entries = [entry(7, 13.8), entry(8, 14.5), entry(9, 14.6), entry(10, 14.7), entry(11, 14.8)]
    mono[0] = 2.0
    reader.on_step(4, 13.0, 14.0, True, 14.0)
    assert 4 not in {s[0] for s in reader.on_step(5, 14.0, 15.0, True, 15.0)["arr"]}


def test_the_reader_keeps_to_its_budget_and_adds_nothing_outside_a_group(monkeypatch: pytest.MonkeyPatch) -> None:
    mono = [0.0]
    outside = arrival_reader.ArrivalReader(lambda: None, clock=lambda: mono[0])
    assert outside.on_step(1, 0.0, 1.0, False, 1.0) is None
    ring = Ring()
    reader = arrival_reader.ArrivalReader(ring, read_every_s=1.0, budget=0.01, clock=lambda: mono[0])
    times = iter([0.0, 0.05])  # one read costs 50 ms: the next may come 5 s later, not 1 s
    monkeypatch.setattr(arrival_reader.time, "thread_time", lambda: next(times))
    reader.on_step(1, 0.0, 1.0, True, 1.0)
    mono[0] = 4.9
    reader.on_step(2, 1.0, 2.0, True, 2.0)
    assert ring.reads == 1


def test_a_beat_carries_its_listeners_fields_and_survives_a_failing_one(tmp_path: Path,
                                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("RAYDBG_PROGRESS_BASE", str(tmp_path))
    monkeypatch.setattr(progress, "_identity", lambda: {"job_id": "j", "train_run": "r", "world_rank": 0})
    seen: list[tuple[int, bool]] = []

    def listener(step: int, start: float, end: float, released: bool, now: float) -> dict[str, Any]:
        seen.append((step, released))
        return {"arr": [[step]]}

    def broken(*args: Any) -> dict[str, Any]:
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
    assert seen == [(2, True), (3, True), (4, False)] and got["arr"] == [[4]] and len(got["busy_s"]) == 3
    # Too long for the record: the listeners' fields go first, the step times stay.
    monkeypatch.setattr(progress, "STEP_LISTENERS", [lambda *a: {"arr": "x" * progress.RECORD_SIZE}])
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
