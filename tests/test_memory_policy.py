"""Kill policy: example scenarios (several after Ray's own) and hypothesis properties."""

from __future__ import annotations

import random

from hypothesis import given, settings
from hypothesis import strategies as st

from raydbg.memory.policy import (
    ACTOR,
    IDLE,
    TASK,
    Candidate,
    PolicyConfig,
    Snapshot,
    decide,
    preference_order,
    rank,
)

GiB = 1 << 30
MiB = 1 << 20
CFG = PolicyConfig(threshold=0.9, margin=0.05, horizon_s=1.0, project_s=0.5)
LIMIT = 10 * GiB
OVER = 9_500 * MiB  # above the 9 GiB threshold; target is 8.5 GiB -> ~1 GiB to free


def task(
    pid: int, mem: int, start: float, owner: str = "driver", retries: int | None = 3, **kw: object
) -> Candidate:
    return Candidate(
        pid=pid, memory=mem, kind=TASK, start_time=start, owner=owner, retries_left=retries, **kw
    )  # type: ignore[arg-type]


def victims(snap: Snapshot, cfg: PolicyConfig = CFG) -> list[int]:
    return [v.candidate.pid for v in decide(snap, cfg).victims]


def test_below_threshold_does_nothing() -> None:
    d = decide(Snapshot(used=8 * GiB, limit=LIMIT, candidates=(task(1, 4 * GiB, 1),)), CFG)
    assert d.action == "none" and d.victims == ()


def test_nothing_to_kill() -> None:
    d = decide(Snapshot(OVER, LIMIT, ()), CFG)
    assert d.action == "nothing-to-kill" and d.need > 0


def test_retriable_before_non_retriable_even_if_smaller() -> None:
    # Ray: test_non_retriable_task_deprioritized.
    snap = Snapshot(OVER, LIMIT, (task(1, 5 * GiB, 1, retries=0), task(2, 2 * GiB, 2, retries=1)))
    d = decide(snap, CFG)
    assert [v.candidate.pid for v in d.victims] == [2]
    assert "1 retries left" in d.victims[0].reason


def test_small_retriable_still_goes_before_big_non_retriable() -> None:
    snap = Snapshot(OVER, LIMIT, (task(1, 5 * GiB, 1, retries=0), task(2, 500 * MiB, 2)))
    d = decide(snap, CFG)
    # The non-retriable one waits for the next round (after the retriable one exited).
    assert [v.candidate.pid for v in d.victims] == [2]
    assert "waits for the next round" in d.message
    after = Snapshot(OVER, LIMIT, (task(1, 5 * GiB, 1, retries=0),))  # others kept growing
    d = decide(after, CFG)
    assert [v.candidate.pid for v in d.victims] == [1] and d.victims[0].freed == 5 * GiB


def test_non_retriable_never_killed_on_a_trend_alone() -> None:
    zero = task(1, 2 * GiB, 1, retries=0, growth=1.0 * GiB)
    snap = Snapshot(used=int(8.6 * GiB), limit=LIMIT, candidates=(zero,), growth=2.0 * GiB)
    d = decide(snap, CFG)
    assert d.trigger == "trend" and d.victims == () and "trend alone" in d.message


def test_unknown_budget_is_non_retriable() -> None:
    snap = Snapshot(OVER, LIMIT, (task(1, 2 * GiB, 5, retries=None), task(2, 2 * GiB, 1)))
    d = decide(snap, CFG)
    assert victims(snap) == [2]
    assert [c.pid for c in d.order] == [2, 1]


def test_same_function_max_retries_zero_call_is_protected() -> None:
    # Retriability belongs to the task, not the function: name is shared.
    zero = task(1, 3 * GiB, 9, retries=0, name="grow")
    ok = task(2, 1500 * MiB, 1, retries=3, name="grow")
    assert victims(Snapshot(OVER, LIMIT, (zero, ok))) == [2]


def test_newest_first_within_group() -> None:
    # Ray: test_memory_pressure_kill_newest_worker.
    cands = tuple(task(p, 2 * GiB, start) for p, start in [(1, 10), (2, 30), (3, 20)])
    assert victims(Snapshot(OVER, LIMIT, cands)) == [2]


def test_largest_group_first() -> None:
    # Ray: group-by-owner: the caller with most tasks here loses one first.
    a = [task(p, 2 * GiB, 10 + p, owner="A") for p in (1, 2, 3)]
    b = [task(9, 2 * GiB, 50, owner="B")]
    assert victims(Snapshot(OVER, LIMIT, tuple(a + b))) == [3]


def test_equal_groups_newest_group_first() -> None:
    a = [task(1, 2 * GiB, 10, owner="A"), task(2, 2 * GiB, 11, owner="A")]
    b = [task(3, 2 * GiB, 20, owner="B"), task(4, 2 * GiB, 21, owner="B")]
    assert victims(Snapshot(OVER, LIMIT, tuple(a + b))) == [4]


def test_never_last_task_of_caller_while_another_frees_enough() -> None:
    # A has a retriable and a non-retriable task; B only one retriable (its last).
    a1 = task(1, 2 * GiB, 10, owner="A")
    a2 = task(2, 1 * GiB, 11, owner="A", retries=0)
    b1 = task(3, 2 * GiB, 99, owner="B")  # newest, but B's last running task
    d = decide(Snapshot(OVER, LIMIT, (a1, a2, b1)), CFG)
    assert [v.candidate.pid for v in d.victims] == [1]


def test_two_non_last_kills_rather_than_a_callers_last_task() -> None:
    a = [task(1, 500 * MiB, 10, owner="A"), task(2, 500 * MiB, 11, owner="A")]
    a_keep = task(3, 1 * GiB, 5, owner="A", retries=0)
    b1 = task(4, 2 * GiB, 99, owner="B")  # alone enough, but B's only running task
    assert victims(Snapshot(OVER, LIMIT, (*a, a_keep, b1))) == [2, 1]


def test_last_task_of_caller_taken_when_others_cannot_free_enough() -> None:
    a1 = task(1, 100 * MiB, 10, owner="A")
    a2 = task(2, 1 * GiB, 11, owner="A", retries=0)
    b1 = task(3, 2 * GiB, 99, owner="B")
    d = decide(Snapshot(OVER, LIMIT, (a1, a2, b1)), CFG)
    assert [v.candidate.pid for v in d.victims] == [3]
    assert "last running task" in d.victims[0].reason


def test_last_of_caller_is_counted_among_the_survivors_of_the_round() -> None:
    # One computation serves the order and the round: once A's newer task is chosen,
    # its older one becomes A's last (idle workers and callerless tasks never are).
    a1, a2 = task(1, GiB, 10, owner="A"), task(2, GiB, 11, owner="A")
    b1 = task(3, GiB, 12, owner="B")
    idle = Candidate(pid=4, memory=GiB, kind=IDLE)
    order, last = rank((a1, a2, b1, idle))
    assert last == {3} and [c.pid for c in order] == [4, 2, 1, 3]
    order, last = rank((a1, a2, b1, idle), frozenset({2}))
    assert last == {1, 3} and [c.pid for c in order] == [4, 1, 3]


def test_frees_enough_with_several_and_stops_when_covered() -> None:
    cands = tuple(task(p, 300 * MiB, p) for p in range(1, 7))  # need is 796 MiB
    d = decide(Snapshot(OVER, LIMIT, cands), CFG)
    assert d.need == OVER - (9 * GiB - int(0.05 * LIMIT))
    freed = [v.freed for v in d.victims]
    assert sum(freed) >= d.need and sum(freed[:-1]) < d.need
    assert [v.candidate.pid for v in d.victims] == [6, 5, 4]  # newest first


def test_newest_first_when_none_alone_frees_enough() -> None:
    cands = (task(1, 700 * MiB, 1), task(2, 500 * MiB, 2), task(3, 300 * MiB, 3))
    d = decide(Snapshot(OVER, LIMIT, cands), CFG)  # need 796 MiB
    assert [v.candidate.pid for v in d.victims] == [3, 2]
    assert "none alone frees enough" in d.victims[0].reason


def test_one_big_kill_rather_than_many_small() -> None:
    small = [task(p, 100 * MiB, 100 + p) for p in range(1, 6)]
    big = task(9, 3 * GiB, 1)
    assert victims(Snapshot(OVER, LIMIT, (*small, big))) == [9]


def test_idle_workers_are_cheapest() -> None:
    idle = Candidate(pid=5, memory=1500 * MiB, kind=IDLE)
    d = decide(Snapshot(OVER, LIMIT, (task(1, 3 * GiB, 1), idle)), CFG)
    assert [v.candidate.pid for v in d.victims] == [5]
    assert d.victims[0].reason.startswith("idle worker")


def test_idle_workers_first_when_together_enough() -> None:
    idles = tuple(Candidate(pid=10 + i, memory=300 * MiB, kind=IDLE) for i in range(3))
    d = decide(Snapshot(OVER, LIMIT, (task(1, 3 * GiB, 1), *idles)), CFG)  # need 796 MiB
    assert [v.candidate.pid for v in d.victims] == [10, 11, 12]


def test_small_idle_worker_is_not_a_pointless_first_kill() -> None:
    idle = Candidate(pid=5, memory=20 * MiB, kind=IDLE)
    d = decide(Snapshot(OVER, LIMIT, (task(1, 3 * GiB, 1), idle)), CFG)
    assert [v.candidate.pid for v in d.victims] == [1]
    assert [c.pid for c in d.order] == [1, 5]
    # ...but it still goes before non-retriable work (which then waits a round).
    d = decide(Snapshot(OVER, LIMIT, (task(1, 3 * GiB, 1, retries=0), idle)), CFG)
    assert [v.candidate.pid for v in d.victims] == [5]
    assert "together free too little" in d.victims[0].reason


def test_tasks_before_actors_and_restartable_actor_before_non_retriable_task() -> None:
    actor = Candidate(pid=1, memory=2 * GiB, kind=ACTOR, start_time=50, owner="D", retries_left=1)
    dead_actor = Candidate(
        pid=2, memory=2 * GiB, kind=ACTOR, start_time=60, owner="D", retries_left=0
    )
    t_ok, t_zero = task(3, 2 * GiB, 10), task(4, 2 * GiB, 70, retries=0)
    order = [c.pid for c in preference_order((actor, dead_actor, t_ok, t_zero))]
    assert order == [3, 1, 4, 2]


def test_infinite_retries_are_retriable() -> None:
    assert victims(
        Snapshot(OVER, LIMIT, (task(1, 2 * GiB, 1, retries=0), task(2, 2 * GiB, 0, retries=-1)))
    ) == [2]


def test_prior_kills_go_after_fresh_candidates() -> None:
    again = task(1, 2 * GiB, 99, prior_kills=1)
    fresh = task(2, 2 * GiB, 10)
    d = decide(Snapshot(OVER, LIMIT, (again, fresh)), CFG)
    assert [v.candidate.pid for v in d.victims] == [2]


def test_trend_acts_before_threshold() -> None:
    grower = task(1, 2 * GiB, 1, growth=1.0 * GiB)
    calm = task(2, 3 * GiB, 2)
    snap = Snapshot(used=int(8.6 * GiB), limit=LIMIT, candidates=(grower, calm), growth=1.5 * GiB)
    d = decide(snap, CFG)
    assert d.trigger == "trend" and d.action == "kill"
    # Need = 8.6 + 1.5 * 0.5 (project_s) - 8.5 = 0.85 GiB; both would free enough.
    assert d.need == int(8.6 * GiB) + int(0.75 * GiB) - (9 * GiB - int(0.05 * LIMIT))
    assert [v.candidate.pid for v in d.victims] == [2]  # the newest of the caller's two
    slow = Snapshot(used=int(8.6 * GiB), limit=LIMIT, candidates=(grower,), growth=0.5 * GiB)
    assert decide(slow, CFG).action == "none"  # 2.8 s to the limit: no hurry
    # Limit 0.9 s away, but in 0.5 s (next round) usage stays under target: watch only.
    early = Snapshot(used=6 * GiB, limit=LIMIT, candidates=(grower,), growth=4.5 * GiB)
    d = decide(early, CFG)
    assert (d.trigger, d.action, d.victims) == ("trend", "none", ())


def test_growth_toward_a_known_peak_is_counted_only_up_to_it() -> None:
    # Two tasks the gate admitted into room that fits their peaks (2.5 GiB each), each
    # growing at 1 GiB/s: 0.3 GiB more each, and the node stays under the 9 GiB threshold.
    def pair(peak: int) -> tuple[Candidate, ...]:
        return tuple(
            task(i, int(2.2 * GiB), i, growth=1.0 * GiB, expected_peak=peak,
                 peak_source="learned" if peak else "unknown")
            for i in (1, 2)
        )  # fmt: skip

    used = int(8.2 * GiB)
    unknown = decide(Snapshot(used, LIMIT, pair(0), growth=2.0 * GiB), CFG)
    assert (unknown.trigger, unknown.action) == ("trend", "kill")  # 8.2 + 2 x 1 s > 10
    known = decide(Snapshot(used, LIMIT, pair(int(2.5 * GiB)), growth=2.0 * GiB), CFG)
    assert (known.trigger, known.action) == (None, "none")  # 8.2 + 2 x 0.3 < 10
    # Near its peak a kill frees its memory plus only what it still had to grow.
    over = decide(Snapshot(OVER, LIMIT, pair(int(2.3 * GiB)), growth=2.0 * GiB), CFG)
    assert over.victims[0].freed == int(2.3 * GiB)
    # Past its expected peak the estimate was wrong: its growth counts in full again.
    past = pair(2 * GiB)
    d = decide(Snapshot(used, LIMIT, past, growth=2.0 * GiB), CFG)
    assert (d.trigger, d.action) == ("trend", "kill")
    assert d.victims[0].freed == int(2.2 * GiB) + int(0.5 * GiB)


def test_a_kill_that_frees_nothing_is_never_made() -> None:
    fresh = task(1, 0, 5)  # the newest, but it has allocated nothing yet
    d = decide(Snapshot(OVER, LIMIT, (fresh, task(2, 2 * GiB, 1, owner="b"))), CFG)
    assert [v.candidate.pid for v in d.victims] == [2]
    alone = decide(Snapshot(OVER, LIMIT, (fresh,)), CFG)
    assert alone.action == "nothing-to-kill"


def test_min_free_trigger() -> None:
    cfg = PolicyConfig(threshold=0.99, min_free=2 * GiB, margin=0.0)
    d = decide(Snapshot(used=int(8.5 * GiB), limit=LIMIT, candidates=(task(1, GiB, 1),)), cfg)
    assert (
        d.trigger == "min-free"
        and d.threshold_bytes == 8 * GiB
        and [v.candidate.pid for v in d.victims] == [1]
    )


def test_message_and_reasons_explain() -> None:
    d = decide(Snapshot(OVER, LIMIT, (task(1, 2 * GiB, 1, name="grow"),)), CFG)
    assert "threshold" in d.message and "GiB" in d.message
    assert "retriable task" in d.victims[0].reason and "enough" in d.victims[0].reason


# ---- properties ---------------------------------------------------------------------


@st.composite
def snapshots(draw: st.DrawFn) -> Snapshot:
    n = draw(st.integers(0, 12))
    owners = ["A", "B", "C", None]
    cands = []
    for pid in range(1, n + 1):
        kind = draw(st.sampled_from([TASK, TASK, TASK, ACTOR, IDLE]))
        cands.append(
            Candidate(
                pid=pid,
                memory=draw(st.integers(0, 4 * GiB)),
                kind=kind,
                start_time=float(draw(st.integers(0, 5))),  # ties on purpose
                owner=draw(st.sampled_from(owners)),
                retries_left=draw(st.sampled_from([None, -1, 0, 0, 1, 3])),
                growth=float(draw(st.sampled_from([0, 0, 100 * MiB]))),
                prior_kills=draw(st.sampled_from([0, 0, 1])),
            )
        )
    limit = 16 * GiB
    # Mostly near/over the threshold: that is where the policy has work to do.
    used = draw(st.one_of(st.integers(0, limit), st.integers(int(0.88 * limit), limit)))
    return Snapshot(used, limit, tuple(cands), growth=float(draw(st.sampled_from([0, 0, GiB]))))


@settings(max_examples=200, deadline=None)
@given(snapshots())
def test_prop_never_empty_when_over_and_candidates(snap: Snapshot) -> None:
    d = decide(snap, CFG)
    useful = [c for c in snap.candidates if CFG_FREED(c) > 0]  # a 0-byte kill is never made
    if d.trigger in ("threshold", "min-free") and useful:
        assert d.action == "kill" and d.victims
    if d.trigger == "trend" and useful:
        assert (d.action == "kill") == (d.need > 0)
    if d.trigger is None:
        assert d.action == "none" and not d.victims


@settings(max_examples=200, deadline=None)
@given(snapshots())
def test_prop_retriable_exhausted_before_non_retriable(snap: Snapshot) -> None:
    d = decide(snap, CFG)
    chosen = {v.candidate.pid for v in d.victims}
    for i, v in enumerate(d.victims):
        if not v.candidate.retriable:
            need_left = d.need - sum(x.freed for x in d.victims[:i])
            # No retriable candidate was left that alone (or together) would free enough
            # (one that frees nothing is never killed).
            left = [
                c
                for c in snap.candidates
                if c.retriable and c.pid not in chosen and CFG_FREED(c) > 0
            ]
            assert not left
            assert all(CFG_FREED(c) < need_left for c in left)


def CFG_FREED(c: Candidate) -> int:
    return c.memory + int(max(0.0, c.growth) * CFG.project_s)


@settings(max_examples=200, deadline=None)
@given(snapshots())
def test_prop_freed_covers_deficit_when_possible_and_no_extra_kill(snap: Snapshot) -> None:
    d = decide(snap, CFG)
    if d.action != "kill":
        return
    total = sum(CFG_FREED(c) for c in snap.candidates)
    got = sum(v.freed for v in d.victims)
    assert got - d.victims[-1].freed < d.need  # the last kill was needed
    if got >= d.need:
        return
    chosen = {v.candidate.pid for v in d.victims}
    left = [c for c in snap.candidates if c.pid not in chosen and CFG_FREED(c) > 0]
    if total >= d.need:
        # Short only where non-retriable work is held back: all left are non-retriable and
        # (retriable kills happened this round, or a trend, or the real excess is covered).
        assert left and all(not c.retriable for c in left)
        assert (
            any(v.candidate.retriable for v in d.victims)
            or d.trigger == "trend"
            or got >= snap.used - d.target_bytes
        )
    else:
        assert not left or all(not c.retriable for c in left)


@settings(max_examples=150, deadline=None)
@given(snapshots(), st.randoms(use_true_random=False))
def test_prop_deterministic_under_input_order(snap: Snapshot, rnd: random.Random) -> None:
    shuffled = list(snap.candidates)
    rnd.shuffle(shuffled)
    a = decide(snap, CFG)
    b = decide(Snapshot(snap.used, snap.limit, tuple(shuffled), snap.growth), CFG)
    assert [v.candidate.pid for v in a.victims] == [v.candidate.pid for v in b.victims]
    assert [v.reason for v in a.victims] == [v.reason for v in b.victims]


@settings(max_examples=150, deadline=None)
@given(snapshots())
def test_prop_tiers_in_order_and_no_duplicates(snap: Snapshot) -> None:
    d = decide(snap, CFG)
    flags = [v.candidate.retriable for v in d.victims]
    assert flags == sorted(flags, reverse=True)  # all retriable kills before any other
    pids = [v.candidate.pid for v in d.victims]
    assert len(pids) == len(set(pids))
