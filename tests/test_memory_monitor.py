"""Monitor loop and who-is-who join, driven by hand on fake /proc trees (no Ray)."""

from __future__ import annotations

import json
import os
import threading
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from doubles import Clock

from raydbg.gcs_tables import ActorRow, TaskRow
from raydbg.memory.kernel_files import Roots
from raydbg.memory.monitor import Growth, MemoryMonitor, MonitorConfig
from raydbg.memory.node_memory import NodeMemory
from raydbg.memory.policy import IDLE, TASK, Candidate, PolicyConfig
from raydbg.memory.process_memory import ProcMem
from raydbg.memory.worker_tasks import Resolver, join_candidates, ray_title, retries_left
from raydbg.proc_identity import pid_alive

GiB = 1 << 30
MiB = 1 << 20
LIMIT = 4 * GiB


def write(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)


def fake_proc(root: Path, pid: int, title: str, mem: int, start_ticks: int = 100) -> None:
    base = root / str(pid)
    write(
        base / "stat",
        f"{pid} (python) S 1 {pid} 0 0 -1 0 0 0 0 0 0 0 0 0 20 0 1 0 {start_ticks} 0\n",
    )
    write(base / "cmdline", title + "\0")
    kb = mem // 1024
    write(base / "status", f"Name:\tpython\nVmRSS:\t{kb} kB\nRssAnon:\t{kb} kB\n")


class FakeMeasurer:
    def __init__(self, roots: Roots, used: list[int]) -> None:
        self.roots = roots
        self.used = used
        self.reads = 0

    def read(self) -> NodeMemory:
        u = self.used[min(self.reads, len(self.used) - 1)]
        self.reads += 1
        return NodeMemory(u, LIMIT, "cgroup1", "/fake", ())

    def pids(self) -> list[int]:
        return sorted(int(p.name) for p in self.roots.proc.iterdir() if p.name.isdigit())


class FakeWho:
    """Candidates as given, with the kills the monitor reported (the KV's `killed/` records
    in production: the one count of kills, read back by identity.Resolver)."""

    def __init__(self, cands: list[Candidate]) -> None:
        self.cands = cands
        self.calls = 0
        self.kills: dict[str, int] = {}

    def killed(self, c: Candidate, event: dict[str, Any]) -> None:
        ident = c.task_id or c.actor_id or ""
        self.kills[ident] = c.prior_kills + 1

    def candidates(self, procs: dict[int, ProcMem], growth: dict[int, float]) -> list[Candidate]:
        self.calls += 1
        return [
            replace(c, prior_kills=self.kills.get(c.task_id or c.actor_id or "", c.prior_kills))
            for c in self.cands
            if c.pid in procs
        ]


CFG = MonitorConfig(mode="on", policy=PolicyConfig(threshold=0.9, margin=0.05, horizon_s=1.0))


@pytest.fixture(autouse=True)
def run_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Local records and the pressure flag of these monitors go here, not in /dev/shm."""
    monkeypatch.setenv("RAYDBG_RUN_DIR", str(tmp_path / "run"))
    return tmp_path / "run"


def make(
    tmp: Path, used: list[int], cands: list[Candidate], cfg: MonitorConfig = CFG
) -> tuple[MemoryMonitor, list[int], list[dict[str, Any]], set[int], Clock]:
    proc = tmp / "proc"
    proc.mkdir(exist_ok=True)
    write(proc / "stat", "btime 1000\n")
    for c in cands:
        fake_proc(proc, c.pid, "ray::IDLE" if c.kind == IDLE else f"ray::{c.name or 'f'}", c.memory)
    killed: list[int] = []
    events: list[dict[str, Any]] = []
    dead: set[int] = set()
    clock = Clock()
    who = FakeWho(cands)
    mon = MemoryMonitor(
        who,
        on_kill=who.killed,
        kill=killed.append,
        record_event=events.append,
        measurer=FakeMeasurer(Roots(proc=proc), used),  # type: ignore[arg-type]
        config=cfg,
        node_id="n1",
        alive=lambda pid: pid not in dead,
        clock=clock,
    )
    return mon, killed, events, dead, clock


def task(pid: int, mem: int, start: float, retries: int | None = 3, **kw: Any) -> Candidate:
    return Candidate(
        pid=pid,
        memory=mem,
        kind=TASK,
        start_time=start,
        owner="drv",
        retries_left=retries,
        name=kw.pop("name", "grow"),
        task_id=kw.pop("task_id", f"t{pid}"),
        function_id=kw.pop("function_id", "fgrow"),
        **kw,
    )


def test_far_from_threshold_is_cheap(tmp_path: Path) -> None:
    mon, killed, events, _, _ = make(tmp_path, [1 * GiB], [task(1, GiB, 1)])
    assert mon.poll() == CFG.refresh_s
    assert mon.stats["scans"] == 0 and mon.who.calls == 0 and not killed  # type: ignore[attr-defined]


def test_pressure_flag_is_up_exactly_while_above_the_high_mark(tmp_path: Path) -> None:
    from raydbg.memory import node_files

    # high mark = 0.9 - 0.05 / 2 = 0.875 of LIMIT
    used = [int(0.5 * LIMIT), int(0.88 * LIMIT), int(0.88 * LIMIT), int(0.8 * LIMIT)]
    mon, *_ = make(tmp_path, used, [])
    assert mon.flag == node_files.flag_path("n1")
    seen = []
    for _ in used:
        mon.poll()
        seen.append(node_files.flag_up(mon.flag))
    assert seen == [False, True, True, False]
    mon.poll()  # still above? no: 0.8 again
    mon.measurer.used = [int(0.9 * LIMIT)]  # type: ignore[attr-defined]
    mon.measurer.reads = 0  # type: ignore[attr-defined]
    mon.poll()
    assert node_files.flag_up(mon.flag)
    mon.stop()
    assert not node_files.flag_up(mon.flag) and mon.flag.exists()  # down, kept for the maps


def test_pressure_flag_says_trend_while_growth_heads_past_the_high_mark(tmp_path: Path) -> None:
    from raydbg.memory import node_files

    # 0.5 of LIMIT growing at 0.4 GiB/s: 3.5 s to the high mark (0.875), past the 2 s
    # horizon: no flag. At 0.7 of LIMIT and the same growth, 1.75 s: "trend". Growth
    # stops below the high mark: down again.
    used = [int(f * LIMIT) for f in (0.5, 0.55, 0.6, 0.65, 0.7, 0.75, 0.75, 0.75, 0.75)]
    mon, killed, _, _, clock = make(tmp_path, used, [])
    assert mon.flag is not None
    seen = []
    for _ in used:
        mon.poll()
        seen.append(node_files.flag_reason(mon.flag) if node_files.flag_up(mon.flag) else "")
        clock.t += 0.5
    assert seen[:3] == ["", "", ""]
    assert "trend" in seen[3:6]
    assert seen[-1] == "" and not killed
    # Above the high mark the reason is memory, whatever the growth.
    mon.measurer.used = [int(0.88 * LIMIT)]  # type: ignore[attr-defined]
    mon.measurer.reads = 0  # type: ignore[attr-defined]
    mon.poll()
    assert node_files.flag_reason(mon.flag) == "memory"


def test_warm_band_polls_fast_and_scans_without_deciding(tmp_path: Path) -> None:
    mon, killed, _, _, clock = make(tmp_path, [int(3.3 * GiB)], [task(1, GiB, 1)])
    assert mon.poll() == CFG.fast_refresh_s
    clock.t += 0.05
    mon.poll()
    assert mon.stats["scans"] == 1  # at most every scan_every_s
    clock.t += 0.3
    mon.poll()
    assert mon.stats["scans"] == 2 and mon.who.calls == 0 and not killed  # type: ignore[attr-defined]


def test_kills_policy_victim_and_explains(tmp_path: Path) -> None:
    zero = task(1, 2 * GiB, 5, retries=0, name="precious", function_id="fprecious")
    old = task(2, 600 * MiB, 1)
    new = task(3, 500 * MiB, 9)
    idle_small = Candidate(pid=4, memory=10 * MiB, kind=IDLE)
    used = int(3.8 * GiB)  # threshold 3.6 GiB, target 3.4 GiB: need 0.4 GiB
    mon, killed, events, dead, clock = make(tmp_path, [used], [zero, old, new, idle_small])
    mon.poll()
    assert killed == [3]  # newest retriable that alone frees enough; idle 10 MiB cannot
    (ev,) = events
    d = ev["details"]
    assert ev["kind"] == "memory.kill" and ev["node_id"] == "n1"
    assert d["used"] == used and d["limit"] == LIMIT and d["threshold"] == 0.9
    assert d["victim"]["pid"] == 3 and "retriable task" in d["victim"]["reason"]
    assert d["victim"]["retries_left"] == 3
    # Killed on its way up: its retry is expected to need what its kind reached (pid 2).
    assert d["victim"]["expected_peak"] == 600 * MiB
    assert {c["pid"] for c in d["candidates"]} == {1, 2, 3, 4}
    assert any(c["pid"] == 1 and c["retriable"] is False for c in d["candidates"])
    assert [p["pid"] for p in d["top_consumers"]][:1] == [1]
    assert "killed task grow (pid 3" in ev["message"]
    # One round in flight: no second kill until the victim is gone.
    clock.t += 0.05
    mon.poll()
    assert killed == [3]
    dead.add(3)
    (tmp_path / "proc" / "3" / "cmdline").unlink()
    clock.t += 0.05
    mon.poll()
    assert killed == [3, 2]  # still over: next round
    assert mon.stats["kills"] == 2 and mon.stats["rounds"] == 2


def test_a_victim_exiting_right_after_a_reading_does_not_cost_a_second_kill(
    tmp_path: Path,
) -> None:
    used = [int(3.8 * GiB), int(3.8 * GiB), int(2.9 * GiB)]
    mon, killed, _, dead, clock = make(tmp_path, used, [task(1, GiB, 1), task(2, GiB, 2)])
    mon.poll()
    assert killed == [2]
    read = mon.measurer.read

    def read_then_victim_exits() -> NodeMemory:
        node = read()  # still counts the victim's memory...
        dead.add(2)  # ...which is freed just after
        (tmp_path / "proc" / "2" / "cmdline").unlink(missing_ok=True)
        return node

    mon.measurer.read = read_then_victim_exits  # type: ignore[method-assign]
    clock.t += 0.05
    mon.poll()
    clock.t += 0.05
    mon.poll()
    assert killed == [2]


def test_victim_that_never_exits_stops_blocking(tmp_path: Path) -> None:
    mon, killed, _, _, clock = make(tmp_path, [int(3.8 * GiB)], [task(1, GiB, 1), task(2, GiB, 2)])
    mon.poll()
    assert killed == [2]
    clock.t += CFG.pending_timeout_s + 1
    mon.poll()
    assert killed == [2, 2] or killed == [2, 1]


def test_dry_run_records_but_never_kills(tmp_path: Path) -> None:
    cfg = MonitorConfig(mode="dry-run", policy=CFG.policy)
    mon, killed, events, _, clock = make(tmp_path, [int(3.8 * GiB)], [task(1, GiB, 1)], cfg)
    mon.poll()
    clock.t += 1
    mon.poll()  # cooldown: no second event yet
    assert killed == [] and len(events) == 1 and events[0]["kind"] == "memory.dry-run"
    assert events[0]["message"].startswith("would kill")
    clock.t += cfg.dry_run_cooldown_s
    mon.poll()
    assert len(events) == 2


def test_off_does_nothing(tmp_path: Path) -> None:
    cfg = MonitorConfig(mode="off")
    mon, killed, events, _, _ = make(tmp_path, [4 * GiB], [task(1, GiB, 1)], cfg)
    mon.poll()
    assert not killed and not events and mon.stats["polls"] == 0


def test_trend_acts_below_threshold(tmp_path: Path) -> None:
    # 2.6 -> 3.1 GiB in 0.25 s = 2 GiB/s: the 4 GiB limit is 0.45 s away, and in 0.25 s
    # (project_s) usage passes the 3.4 GiB target.
    mon, killed, events, _, clock = make(
        tmp_path, [int(2.6 * GiB), int(3.1 * GiB)], [task(1, GiB, 1)]
    )
    mon.poll()
    assert not killed
    clock.t += 0.25
    mon.poll()
    assert killed == [1] and events[0]["details"]["trigger"] == "trend"
    assert events[0]["details"]["reaction_s"] == 0.25  # from the last calm poll


@pytest.mark.parametrize("known", ["learned", "reservation", "unknown"])
def test_a_task_growing_toward_its_expected_peak_is_not_trend_killed(
    tmp_path: Path, run_dir: Path, known: str
) -> None:
    # The same 2 GiB/s trend, all of it one task that the gate let in to reach 1.1 GiB:
    # 0.1 GiB to go, so the node stays under the threshold; only unknown peaks are killed.
    grower = task(1, GiB, 1, growth=2.0 * GiB)
    mon, killed, events, _, clock = make(tmp_path, [int(2.6 * GiB), int(3.1 * GiB)], [grower])
    if known == "learned":
        mon.learner.note("fgrow", int(1.1 * GiB))
        mon.learner.complete.add("fgrow")
    elif known == "reservation":
        run_dir.mkdir(parents=True, exist_ok=True)
        (run_dir / "reserve-1").write_text(str(int(1.1 * GiB)))
    mon.poll()
    clock.t += 0.25
    mon.poll()
    if known == "unknown":
        assert killed == [1] and events[0]["details"]["trigger"] == "trend"
        assert events[0]["details"]["victim"]["peak_source"] == "unknown"
    else:
        assert killed == [] and mon.last_decision is not None
        assert mon.last_decision.action == "none"


def test_repeat_kill_of_same_task_counts_prior_kills(tmp_path: Path) -> None:
    a, b = task(1, GiB, 1), task(2, GiB, 2)
    mon, killed, events, dead, clock = make(tmp_path, [int(3.8 * GiB)], [a, b])
    mon.poll()
    assert killed == [2]
    # Ray retries task t2 in a new worker pid 5; t1 stays. The retry must not go first again.
    dead.add(2)
    retry = task(5, GiB, 10, task_id="t2")
    fake_proc(tmp_path / "proc", 5, "ray::grow", GiB)
    (tmp_path / "proc" / "2" / "cmdline").unlink()
    mon.who.cands = [a, retry]  # type: ignore[attr-defined]
    clock.t += 0.05
    mon.poll()
    assert killed == [2, 1]
    assert events[-1]["details"]["candidates"][1]["prior_kills"] == 1


def test_run_and_stop_in_a_thread(tmp_path: Path) -> None:
    mon, _, _, _, _ = make(tmp_path, [GiB], [task(1, GiB, 1)])
    mon.clock = __import__("time").monotonic
    t = threading.Thread(target=mon.run)
    t.start()
    while mon.stats["polls"] < 2:
        pass
    mon.stop()
    t.join(2)
    assert not t.is_alive() and mon.status()["memory"]["limit"] == LIMIT


def test_config_from_env(monkeypatch: pytest.MonkeyPatch) -> None:
    from raydbg.memory import settings

    monkeypatch.setenv("RAYDBG_MEMORY_MONITOR", "dry-run")
    monkeypatch.setenv("RAYDBG_MEMORY_THRESHOLD", "0.8")
    monkeypatch.setenv("RAYDBG_MEMORY_MIN_FREE", str(GiB))
    settings.reload()
    cfg = MonitorConfig.current()
    assert cfg.mode == "dry-run" and cfg.policy.threshold == 0.8 and cfg.policy.min_free == GiB
    monkeypatch.setenv("RAYDBG_MEMORY_MONITOR", "0")
    monkeypatch.setenv("RAYDBG_MEMORY_THRESHOLD", "junk")
    settings.reload()
    cfg = MonitorConfig.current()
    assert cfg.mode == "off" and cfg.policy.threshold == 0.9
    monkeypatch.undo()
    settings.reload()


# min-free 2 GiB of 4: the threshold mark is 2 GiB (0.5 of LIMIT), not 0.9 of LIMIT.
MIN_FREE_CFG = replace(CFG, refresh_s=1.0, policy=replace(CFG.policy, min_free=2 * GiB))


def test_min_free_moves_the_warm_band(tmp_path: Path) -> None:
    # 1.5 GiB is within the warm band (15% of the limit) below the 2 GiB mark, though far
    # below 0.9 of the limit: fast polls and per-process scans, no kill yet.
    mon, killed, _, _, _ = make(tmp_path, [int(1.5 * GiB)], [task(1, GiB, 1)], MIN_FREE_CFG)
    assert mon.poll() == MIN_FREE_CFG.fast_refresh_s
    assert mon.stats["scans"] == 1 and not killed


def test_min_free_moves_the_refresh_interval(tmp_path: Path) -> None:
    # 1.25 GiB growing at 0.5 GiB/s: 1.5 s to the 2 GiB mark, polled every 1.5 / 4 s
    # (not 4.7 s to 0.9 of the limit, which would give the 1 s refresh).
    mon, killed, _, _, clock = make(tmp_path, [GiB, int(1.25 * GiB)], [], MIN_FREE_CFG)
    mon.poll()
    clock.t += 0.5
    assert mon.poll() == pytest.approx(1.5 / 4, rel=1e-3)
    assert not killed


def test_growth_window() -> None:
    g = Growth(window_s=0.5)
    assert g.add(0.0, 0) == 0.0
    assert g.add(0.25, GiB) == pytest.approx(4 * GiB)
    for i in range(2, 10):
        g.add(i * 0.25, GiB)
    assert g.add(2.5, GiB) == 0.0  # flat for longer than the window


def test_pid_alive_on_fake_and_real(tmp_path: Path) -> None:
    proc = tmp_path / "proc"
    write(proc / "5" / "stat", "5 (x) Z 1 5\n")
    write(proc / "6" / "stat", "6 (a) b) S 1 6\n")
    assert not pid_alive(5, proc) and pid_alive(6, proc) and not pid_alive(7, proc)
    import os

    assert pid_alive(os.getpid())


# ---- who-is-who join (pure) -----------------------------------------------------------


def pm(pid: int, mem: int, start: float = 100.0) -> ProcMem:
    return ProcMem(pid, 1, "python", mem, mem, mem, 0, "smaps_rollup", start, 1000)


def test_candidates_join() -> None:
    procs = {p: pm(p, p * MiB) for p in (10, 11, 12, 13, 14, 15, 16)}
    titles = {10: "f", 11: "IDLE", 12: "A", 13: "DashboardAgent", 14: "f", 16: "g"}  # 15: not Ray
    tasks = [
        TaskRow("t10", 1, "f", "j", "parent", 10, "n", 150.0),
        TaskRow("t10old", 0, "f", "j", "parent", 10, "n", 120.0),
        TaskRow("t16", 0, "g", "j", "parent", 16, "n", 50.0),  # older than the process: stale
    ]
    actors = [ActorRow("a12", 12, "A", "", "j", "owner", 2, 1, "n", 90.0)]
    out = {
        c.pid: c
        for c in join_candidates(
            procs, titles, tasks, actors, {"t10": 3}, {"t10": 1}, protect=frozenset({14})
        )
    }
    assert set(out) == {10, 11, 12, 16}
    t = out[10]
    assert (t.kind, t.task_id, t.retries_left, t.attempt, t.owner, t.prior_kills) == (
        "task",
        "t10",
        2,
        1,
        "parent",
        1,
    )
    assert out[11].kind == "idle" and out[11].retriable
    a = out[12]
    assert (a.kind, a.retries_left, a.actor_id, a.name) == ("actor", 1, "a12", "A")
    assert out[16].task_id is None and out[16].retries_left is None and not out[16].retriable


def test_retries_left() -> None:
    assert retries_left(None, 0) is None
    assert retries_left(-1, 7) == -1
    assert retries_left(3, 1) == 2 and retries_left(1, 4) == 0


def test_ray_title(tmp_path: Path) -> None:
    proc = tmp_path / "proc"
    write(proc / "1" / "cmdline", "ray::IDLE\0")
    write(proc / "2" / "cmdline", "/usr/bin/python\0x.py\0")
    write(proc / "3" / "cmdline", "ray::Actor.method extra\0")
    roots = Roots(proc=proc)
    assert ray_title(1, roots) == "IDLE" and ray_title(2, roots) is None
    assert ray_title(3, roots) == "Actor.method" and ray_title(4, roots) is None


class BrokenView:
    def running_tasks(self, node_id: str) -> list[TaskRow]:
        raise ConnectionError("gcs down")

    def actors(self, node_id: str) -> list[ActorRow]:
        return []

    def budgets(self, task_ids: list[str], functions: Any = None) -> dict[str, dict[str, Any]]:
        return {}

    def prior_kills(self, task_ids: list[str]) -> dict[str, int]:
        return {}


def test_resolver_degrades_to_unknown_when_gcs_fails(tmp_path: Path) -> None:
    proc = tmp_path / "proc"
    write(proc / "1" / "cmdline", "ray::f\0")
    write(proc / "2" / "cmdline", "ray::IDLE\0")
    r = Resolver(BrokenView(), roots=Roots(proc=proc))
    out = {c.pid: c for c in r.candidates({1: pm(1, GiB), 2: pm(2, MiB)}, {})}
    assert r.errors == 1 and out[1].retries_left is None and out[2].kind == "idle"


def test_local_records_roundtrip_and_prune(tmp_path: Path) -> None:
    from raydbg.memory import node_files

    d = tmp_path / "run"
    node_files.write_running("t1", 2, "grow", "01000000", d)
    me = os.getpid()
    assert node_files.read_running([me, 1], d)[me]["attempt"] == 2
    write(d / "999999999", "{}")
    write(d / "junk", "x")
    assert node_files.prune(d) == 1 and {p.name for p in d.iterdir()} == {"junk", str(me)}


def test_a_record_matches_the_title_ray_gives_its_task() -> None:
    from raydbg.memory.node_files import matches_title

    assert matches_title("grow", "grow") and matches_title("__main__.grow", "grow")
    # options(name=...) and Ray Data name the task, and the title is up to the first space.
    assert matches_title("Nap Named(x.y)", "Nap")
    assert matches_title("ReadRange->MapBatches(f)", "ReadRange->MapBatches(f)")
    assert not matches_title("grow", "IDLE") and not matches_title("grow", None)
    assert not matches_title("ReadRange->MapBatches(f)", "f)")


def test_merge_local_fills_what_gcs_does_not_know_yet() -> None:
    from raydbg.memory.worker_tasks import merge_local

    gcs = [TaskRow("old", 0, "f", "j", "caller", 10, "n", 100.0)]
    recs = {
        10: {"task_id": "new", "attempt": 1, "name": "mod.f", "job_id": "j", "start": 200.0},
        11: {"task_id": "t11", "attempt": 0, "name": "g", "job_id": "j", "start": 150.0},
        12: {"task_id": "t12", "attempt": 0, "name": "g", "job_id": "j", "start": 150.0},
        13: {"task_id": "t13", "attempt": 0, "name": "g", "job_id": "j", "start": 150.0},
    }
    titles = {10: "f", 11: "g", 12: "IDLE", 13: "h"}  # 12 idle, 13 moved on: stale
    out = merge_local(gcs, recs, titles, "n")
    assert {(t.task_id, t.worker_pid) for t in out} == {("old", 10), ("new", 10), ("t11", 11)}
    # GCS caught up with pid 10: no duplicate from the local record.
    gcs2 = [TaskRow("new", 1, "f", "j", "caller", 10, "n", 200.1)]
    assert [t.task_id for t in merge_local(gcs2, {10: recs[10]}, titles, "n")] == ["new"]
    # The worker's previous task, started just before (GCS still lists it as running):
    # the record names the one running now.
    gcs3 = [TaskRow("prev", 0, "f", "j", "caller", 10, "n", 199.9)]
    assert [t.task_id for t in merge_local(gcs3, {10: recs[10]}, titles, "n")] == ["prev", "new"]
    # GCS already knows a later task of that worker: the record is stale.
    gcs4 = [TaskRow("later", 0, "f", "j", "caller", 10, "n", 201.0)]
    assert [t.task_id for t in merge_local(gcs4, {10: recs[10]}, titles, "n")] == ["later"]


class FreshView(BrokenView):
    def running_tasks(self, node_id: str) -> list[TaskRow]:
        return []  # GCS has not heard of the task yet

    def budgets(self, task_ids: list[str], functions: Any = None) -> dict[str, dict[str, Any]]:
        return {"t1": {"max_retries": 0, "parent": "drv"}}


def test_resolver_knows_a_fresh_task_from_its_local_record(tmp_path: Path) -> None:
    from raydbg.memory import node_files

    proc = tmp_path / "proc"
    write(proc / "1" / "cmdline", "ray::grow\0")
    d = tmp_path / "run"
    (d).mkdir()
    (d / "1").write_text(
        json.dumps({"task_id": "t1", "attempt": 0, "name": "grow", "job_id": "j", "start": 150.0})
    )
    r = Resolver(FreshView(), roots=Roots(proc=proc), run_dir=d)
    (c,) = r.candidates({1: pm(1, GiB)}, {})
    assert (c.task_id, c.retries_left, c.owner) == ("t1", 0, "drv") and not c.retriable
    assert node_files.read_running([1], d)


def test_resolver_skips_tasks_held_at_start(tmp_path: Path) -> None:
    proc = tmp_path / "proc"
    d = tmp_path / "run"
    d.mkdir()
    for pid, held in ((1, True), (2, False)):
        write(proc / str(pid) / "cmdline", "ray::grow\0")
        rec = {"task_id": f"t{pid}", "attempt": 1, "name": "grow", "job_id": "j", "start": 150.0}
        (d / str(pid)).write_text(json.dumps({**rec, "held": held}))
    r = Resolver(FreshView(), roots=Roots(proc=proc), run_dir=d)
    out = r.candidates({1: pm(1, GiB), 2: pm(2, GiB)}, {})
    assert [c.pid for c in out] == [2] and r.held == {1}


METRICS_RUN = """
import sys
sys.path.insert(0, {tests!r})
from pathlib import Path
from raydbg import telemetry
from raydbg.telemetry.prometheus import prometheus_text
telemetry.setup("agent")
import test_memory_monitor as t
used = [int(3.8 * t.GiB)]  # over the threshold (3.6 of 4 GiB)
mon, killed, events, dead, clock = t.make(Path({tmp!r}), used, [t.task(3, 500 * t.MiB, 9)])
mon.poll()  # crossed: the kill
assert killed == [3], killed
dead.add(3)
used[0] = 2 * t.GiB
clock.t += 2.5
mon.poll()  # back under, 2.5 s after the crossing
sys.stdout.write(prometheus_text(node=False).decode())
"""


def test_kill_reaction_and_recovery_metrics(tmp_path: Path, run_dir: Path) -> None:
    """raydbg.memory.kills, .reaction and .recovery, read back as the agent's /metrics
    serves them (a process of its own: telemetry is set up once per process)."""
    import subprocess
    import sys

    code = METRICS_RUN.format(tests=str(Path(__file__).resolve().parent), tmp=str(tmp_path))
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OTEL_", "RAYDBG_TELEMETRY"))}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                         env={**env, "RAYDBG_TELEMETRY_DIR": str(tmp_path / "telemetry")})
    assert out.returncode == 0, out.stderr
    lines = [x for x in out.stdout.splitlines() if x.startswith("raydbg_memory_")]
    series = {x.rsplit(" ", 1)[0]: float(x.rsplit(" ", 1)[1]) for x in lines}

    def value(name: str, *labels: str) -> float:
        found = [v for k, v in series.items() if k.split("{")[0] == name and all(lab in k for lab in labels)]
        assert len(found) == 1, (name, labels, lines)
        return found[0]

    assert value("raydbg_memory_kills_total", 'kind="task"', 'dry_run="false"', 'node_id="n1"') == 1
    assert value("raydbg_memory_reaction_seconds_count", 'node_id="n1"') == 1
    assert value("raydbg_memory_reaction_seconds_sum", 'node_id="n1"') == 0  # killed in the crossing's poll
    assert value("raydbg_memory_recovery_seconds_count", 'node_id="n1"') == 1
    assert value("raydbg_memory_recovery_seconds_sum", 'node_id="n1"') == 2.5
