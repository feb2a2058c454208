"""Learned per-function peaks: the monitor observes and publishes, the gate reads (no Ray)."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from test_memory_monitor import CFG, LIMIT, GiB, MiB, fake_proc, make, task, write

from raydbg.memory.learn import PeakLearner, PeakTable, peaks_path


@pytest.fixture(autouse=True)
def run_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("RAYDBG_RUN_DIR", str(tmp_path / "run"))
    (tmp_path / "run").mkdir(mode=0o700)  # private, as raydbg requires of a run dir
    return tmp_path / "run"


# What local.RunningRecord writes at a task start (gate.py), per worker pid.
def record(run_dir: Path, pid: int, name: str, fn: str, held: bool = False) -> None:
    r = {"task_id": f"t{pid}", "attempt": 0, "start": 1.0, "held": held, "name": name, "fn": fn}
    write(run_dir / str(pid), json.dumps(r))


def test_learner_keeps_the_most_a_function_held_and_publishes_only_big_ones(tmp_path: Path) -> None:
    path = tmp_path / "peaks-n1"
    lr = PeakLearner(path, min_fraction=0.05, every_s=1.0)
    recs = {
        1: {"name": "mod.grow", "fn": "aa"},
        2: {"name": "grow", "fn": "aa"},
        3: {"name": "small", "fn": "bb"},
        4: {"name": "grow", "fn": "aa", "held": True},  # held at start: holds nothing of it
        5: {"name": "grow", "fn": "aa"},  # its worker runs something else now (title)
    }
    titles = {1: "grow", 2: "grow", 3: "small", 4: "grow", 5: "other"}
    lr.observe({1: GiB, 2: 2 * GiB, 3: 100 * MiB, 4: 3 * GiB, 5: 3 * GiB}, recs, titles)
    lr.observe({1: GiB // 2}, recs, titles)  # less later: the peak stays
    assert lr.peaks == {"aa": 2 * GiB, "bb": 100 * MiB}
    assert lr.publish(LIMIT, now=10.0)
    # 100 MiB < 5% of 4 GiB; no task seen to end yet: a lower bound only.
    assert json.loads(path.read_text()) == {"peaks": {"aa": 2 * GiB}, "complete": []}
    lr.observe({3: GiB}, recs, titles)
    assert not lr.publish(LIMIT, now=10.5)  # changed, but within every_s of the last write
    assert lr.publish(LIMIT, now=11.0)
    assert not lr.publish(LIMIT, now=20.0)  # unchanged: no write
    assert json.loads(path.read_text())["peaks"] == {"aa": 2 * GiB, "bb": GiB}


def test_a_peak_is_complete_once_a_task_of_the_function_ended_on_its_own(tmp_path: Path) -> None:
    lr = PeakLearner(tmp_path / "peaks-n1", min_fraction=0.05, every_s=0)
    recs = {1: {"task_id": "t1", "name": "grow", "fn": "aa"}}
    recs[2] = {"task_id": "t2", "name": "grow", "fn": "bb"}
    titles = {1: "grow", 2: "grow"}
    lr.observe({1: GiB, 2: GiB}, recs, titles)
    assert lr.complete == set()
    lr.observe({1: GiB, 2: GiB}, recs, titles)  # the same tasks still run
    assert lr.complete == set()
    # Worker 1 is idle now (alive, its task ended); worker 2 is gone (killed: not complete).
    lr.observe({1: 60 * MiB}, recs, {1: "IDLE"})
    assert lr.complete == {"aa"}
    assert lr.publish(LIMIT, now=1.0)
    table = PeakTable(tmp_path / "peaks-n1")
    assert table.get("aa") == GiB and table.is_complete("aa")
    assert table.get("bb") == GiB and not table.is_complete("bb")
    # A worker that moved on to another task of the same function: the first one ended.
    lr2 = PeakLearner(None)
    lr2.observe({3: GiB}, {3: {"task_id": "x", "name": "g", "fn": "cc"}}, {3: "g"})
    lr2.observe({3: GiB}, {3: {"task_id": "y", "name": "g", "fn": "cc"}}, {3: "g"})
    assert lr2.complete == {"cc"}


def test_table_rereads_a_changed_file_at_most_every_period(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import raydbg.memory.learn as learn

    t = [100.0]
    monkeypatch.setattr(learn.time, "monotonic", lambda: t[0])
    path = tmp_path / "peaks-n1"
    table = PeakTable(path, every_s=0.5)
    assert table.get("aa") == 0  # no file yet
    path.write_text(json.dumps({"peaks": {"aa": GiB}}))
    assert table.get("aa") == 0  # checked 0 s ago
    t[0] += 0.5
    assert table.get("aa") == GiB
    path.write_text("{broken")
    os.utime(path, (1, 1))
    t[0] += 0.5
    assert table.get("aa") == GiB  # a bad file keeps what was known
    assert table.get("") == 0 and PeakTable(None).get("aa") == 0


def test_monitor_learns_from_its_scans_and_publishes_for_the_gate(
    tmp_path: Path, run_dir: Path
) -> None:
    # Warm band (0.8 of the limit): the monitor scans processes but kills nothing.
    mon, killed, _, _, _ = make(
        tmp_path, [int(0.8 * LIMIT)], [task(7, GiB, 1), task(8, 50 * MiB, 1)]
    )
    record(run_dir, 7, "grow", "f00d")
    record(run_dir, 8, "grow", "beef")
    mon.poll()
    assert not killed and mon.stats["scans"] == 1
    path = peaks_path("n1")
    assert path == run_dir / "peaks-n1"
    assert json.loads(path.read_text())["peaks"] == {"f00d": GiB}
    assert PeakTable(path).get("f00d") == GiB


def test_monitor_follows_a_big_task_to_its_peak_and_end_however_calm_the_node(
    tmp_path: Path, run_dir: Path
) -> None:
    # One poll in the warm band (a scan sees "f00d" at 600 MiB: big), then 0.5 of the
    # limit, far below it, where the monitor scanned nothing before.
    used = [int(0.8 * LIMIT), int(0.5 * LIMIT)]
    mon, killed, _, _, clock = make(tmp_path, used, [task(7, 600 * MiB, 1)])
    record(run_dir, 7, "grow", "f00d")
    mon.poll()
    assert mon.stats["scans"] == 1 and mon.learner.following(LIMIT)
    proc = tmp_path / "proc"
    fake_proc(proc, 7, "ray::grow", 730 * MiB)  # it grows on, to its true peak
    clock.t += CFG.scan_every_s
    mon.poll()
    assert mon.stats["scans"] == 2 and mon.learner.peaks["f00d"] == 730 * MiB
    fake_proc(proc, 7, "ray::IDLE", 60 * MiB)  # its task ended on its own
    clock.t += CFG.scan_every_s
    mon.poll()
    assert mon.stats["scans"] == 3 and "f00d" in mon.learner.complete
    assert not mon.learner.following(LIMIT)
    clock.t += 1.0
    mon.poll()
    assert mon.stats["scans"] == 3  # nothing big runs: calm polls cost no scan again
    clock.t += 1.0
    mon.poll()  # published at most every 0.25 s: the gate sees the true, complete peak
    table = PeakTable(peaks_path("n1"))
    assert table.get("f00d") == 730 * MiB and table.is_complete("f00d") and not killed
