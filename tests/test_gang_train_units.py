"""Unit tests (no Ray): Train timeout, pause groups, resume targets, progress records, hang decisions."""

from __future__ import annotations

import os
import subprocess
import sys
import types
from pathlib import Path
from typing import Any

import pytest
from doubles import FakeGcs

from raydbg import _ray_internals
from raydbg import progress_records as progress
from raydbg.gang import hang, pause
from raydbg.records import label
from raydbg.schema import SessionRecord
from raydbg.worker import pause_group, train


# --- timeout -----------------------------------------------------------------------
def test_pg_timeout_never_below_the_users() -> None:
    assert train.pg_timeout_s(3, env="") == train.DEFAULT_PG_TIMEOUT_S
    assert train.pg_timeout_s(3, env="600") == 600
    assert train.pg_timeout_s(7200, env="600") == 7200
    assert train.pg_timeout_s(3, env="0") == 3  # 0: raydbg leaves the user's timeout alone
    assert train.pg_timeout_s(3, env="junk") == train.DEFAULT_PG_TIMEOUT_S


def test_wrapped_pg_setup_raises_timeout_and_keeps_pickle_identity() -> None:
    seen: dict[str, Any] = {}
    mod = types.ModuleType("fake_torch_config")

    def _setup_torch_process_group(backend: str, world_rank: int, world_size: int, init_method: str,
                                   timeout_s: int = 1800) -> str:
        seen.update(backend=backend, world_rank=world_rank, timeout_s=timeout_s)
        return "ok"

    _setup_torch_process_group.__module__ = mod.__name__
    _setup_torch_process_group.__qualname__ = "_setup_torch_process_group"
    mod._setup_torch_process_group = _setup_torch_process_group  # type: ignore[attr-defined]
    after: list[dict[str, Any]] = []
    assert _ray_internals.wrap_torch_pg_setup(mod, lambda t: max(t, 100), after.append)
    assert not _ray_internals.wrap_torch_pg_setup(mod, lambda t: t, after.append)  # once only
    fn = mod._setup_torch_process_group  # type: ignore[attr-defined]
    assert fn.__module__ == mod.__name__ and fn.__qualname__ == "_setup_torch_process_group"
    assert fn("gloo", 1, 2, init_method="tcp://x", timeout_s=3) == "ok"
    assert seen == {"backend": "gloo", "world_rank": 1, "timeout_s": 100}
    assert after[0]["world_rank"] == 1


def test_report_wrapper_calls_before_and_after_even_when_it_raises() -> None:
    mod = types.ModuleType("fake_fn_utils")
    calls: list[str] = []

    class DistributedTrainFnUtils:
        def report(self, metrics: dict[str, Any]) -> dict[str, Any]:
            calls.append("report")
            if metrics.get("fail"):
                raise RuntimeError("barrier reset")
            return metrics

    mod.DistributedTrainFnUtils = DistributedTrainFnUtils  # type: ignore[attr-defined]
    assert _ray_internals.wrap_train_report(mod, lambda: calls.append("before"), lambda: calls.append("after"))
    assert DistributedTrainFnUtils().report({"a": 1}) == {"a": 1}
    assert calls == ["before", "report", "after"]
    with pytest.raises(RuntimeError):
        DistributedTrainFnUtils().report({"fail": 1})
    assert calls[3:] == ["before", "report", "after"]


def test_post_import_hook_patches_a_module_when_imported(tmp_path: Path) -> None:
    (tmp_path / "raydbg_fake_mod_x.py").write_text("VALUE = 1\n")
    code = (
        f"import sys; sys.path.insert(0, {str(tmp_path)!r})\n"
        "from raydbg.worker import train\n"
        "train.when_imported('raydbg_fake_mod_x', lambda m: setattr(m, 'VALUE', 2))\n"
        "assert 'raydbg_fake_mod_x' not in sys.modules\n"
        "import raydbg_fake_mod_x\n"
        "print(raydbg_fake_mod_x.VALUE)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "2"


def test_install_imports_neither_torch_nor_ray_train() -> None:
    code = ("import sys\nfrom raydbg.worker import train\ntrain.install()\n"
            "print('torch' in sys.modules, 'ray.train' in sys.modules)\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "False False"


# --- pause groups --------------------------------------------------------------------
def _rec(**kw: Any) -> SessionRecord:
    base: dict[str, Any] = dict(id="s1", job_id="01000000", pid=1, thread_id=1, thread_name="t",
                                file="/a/train.py", line=10, function="f", reason="breakpoint")
    base.update(kw)
    return SessionRecord(**base)


def test_group_id_same_across_ranks_new_per_occurrence(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(pause_group.PAUSE_ENV, "all")
    monkeypatch.setattr(pause_group, "_occurrences", {})
    r0 = _rec(train_run="run", train_rank=0)
    pause_group.assign_group(r0)
    monkeypatch.setattr(pause_group, "_occurrences", {})  # another process: its own count
    r1 = _rec(train_run="run", train_rank=1, file="/elsewhere/train.py")
    pause_group.assign_group(r1)
    assert r0.group and r0.group == r1.group and r0.group.startswith("g") and len(r0.group) == 12
    again = _rec(train_run="run", train_rank=1)
    pause_group.assign_group(again)  # second time this process reaches the line
    assert again.group != r1.group


def test_breakpoint_all_ranks_groups_that_pause_only(monkeypatch: pytest.MonkeyPatch) -> None:
    """The API route to pause-all, `raydbg.breakpoint(all_ranks=True)` (the e2e takes RAYDBG_TRAIN_PAUSE=all)."""
    import raydbg
    from raydbg.worker import hook, session

    monkeypatch.delenv(pause_group.PAUSE_ENV, raising=False)
    monkeypatch.setattr(pause_group, "_occurrences", {})
    monkeypatch.setattr(sys, "breakpointhook", hook.breakpointhook)  # as in an activated worker
    recs: list[SessionRecord] = []

    def pause(frame: types.FrameType, reason: str = "breakpoint", *args: Any, **kw: Any) -> None:
        """session.pause up to its group assignment (the rest needs a worker and debugpy)."""
        rec = _rec(train_run="run", train_rank=0, file=frame.f_code.co_filename, line=frame.f_lineno,
                   function=frame.f_code.co_name, reason=reason)
        pause_group.assign_group(rec)
        recs.append(rec)

    monkeypatch.setattr(session, "pause", pause)
    raydbg.breakpoint(all_ranks=True)
    raydbg.breakpoint()
    grouped, alone = recs
    assert grouped.group and grouped.group.startswith("g") and alone.group is None
    assert grouped.function == "test_breakpoint_all_ranks_groups_that_pause_only"  # the caller's frame
    assert not pause_group.pause_all_requested()  # only for that one pause


def test_no_group_without_pause_all_or_outside_train(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(pause_group.PAUSE_ENV, raising=False)
    r = _rec(train_run="run", train_rank=0)
    pause_group.assign_group(r)
    assert r.group is None
    monkeypatch.setenv(pause_group.PAUSE_ENV, "all")
    plain = _rec()
    pause_group.assign_group(plain)
    assert plain.group is None
    exc = _rec(train_run="run", reason="exception")
    pause_group.assign_group(exc)
    assert exc.group is None


def test_groups_and_resolve() -> None:
    recs = [
        {"id": "b", "group": "g1", "train_rank": 1, "train_world_size": 2, "since": 5, "job_id": "j"},
        {"id": "a", "group": "g1", "train_rank": 0, "train_world_size": 2, "since": 4, "job_id": "j"},
        {"id": "c", "group": None, "since": 6},
    ]
    gs = pause.groups(recs)
    assert len(gs) == 1
    assert gs[0]["sessions"] == ["a", "b"] and gs[0]["ranks"] == [0, 1] and gs[0]["complete"]
    assert gs[0]["since"] == 4
    assert pause.resolve("g1", recs) == ("group", ["b", "a"])
    assert pause.resolve("c", recs) == ("session", ["c"])
    assert pause.resolve("zzz", recs) == ("", [])


def test_label_shows_rank_and_size() -> None:
    assert label({"task_name": "t", "train_rank": 1, "train_world_size": 4}) == "t [rank 1/4]"


# --- progress records ----------------------------------------------------------------
def test_progress_beats_are_fixed_size_and_read_back(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("RAYDBG_PROGRESS_BASE", str(tmp_path))
    monkeypatch.setattr(progress, "_identity", lambda: {"job_id": "j", "train_run": "r", "world_rank": 2})
    b = progress.Beat()
    b.beat()
    b.beat()
    directory = progress.progress_dir()
    assert oct(directory.stat().st_mode & 0o777) == "0o700"
    path = directory / str(os.getpid())
    assert path.stat().st_size == progress.RECORD_SIZE
    (directory / "999999999").write_text("{}")  # a dead pid's record goes
    (directory / str(os.getppid())).write_bytes(b"{not json")  # a torn one is skipped
    recs = progress.read_all()
    assert [(r["step"], r["train_run"], r["world_rank"], r["pid"]) for r in recs] == [(2, "r", 2, os.getpid())]
    assert not (directory / "999999999").exists()
    b.done()
    assert not path.exists()


def test_latest_and_progress_map() -> None:
    recs = [
        {"job_id": "j", "train_run": "r", "world_rank": 0, "pid": 1, "ts": 1.0},
        {"job_id": "j", "train_run": "r", "world_rank": 0, "pid": 2, "ts": 3.0},  # restarted rank
        {"job_id": "j", "train_run": None, "pid": 5, "node_id": "n", "ts": 2.0},
    ]
    latest = progress.latest(recs)
    assert latest[("j", "r", "rank 0")]["pid"] == 2
    assert ("j", "", "n:5") in latest
    pm = progress.as_progress_map(recs)
    assert pm[("j", "r", 0)] == 3.0 and pm[5] == 2.0


# --- hang decisions --------------------------------------------------------------------
def _beats(ts: float, ranks: int = 2, run: str = "r") -> list[dict[str, Any]]:
    return [{"job_id": "j", "train_run": run, "world_rank": i, "pid": 10 + i, "ts": ts, "world_size": ranks}
            for i in range(ranks)]


def test_stuck_run_fires_once_then_again_only_after_progress() -> None:
    d = hang.HangDecider(10)
    assert d.update(_beats(0), [], now=5) == []
    found = d.update(_beats(0), [], now=11)
    assert len(found) == 1 and found[0]["train_run"] == "r" and found[0]["world_size"] == 2
    assert [r["world_rank"] for r in found[0]["ranks"]] == [0, 1]
    assert d.update(_beats(0), [], now=30) == []  # once per stall
    assert d.update(_beats(31), [], now=32) == []  # progress again
    assert len(d.update(_beats(31), [], now=42)) == 1  # a new stall


def test_slow_but_progressing_run_never_fires() -> None:
    d = hang.HangDecider(10)
    for now in range(0, 100, 3):
        assert d.update(_beats(now - 8), [], now=now) == []  # a step every ~8 s under a 10 s threshold


def test_paused_run_is_not_a_hang_and_its_pause_does_not_count() -> None:
    d = hang.HangDecider(10)
    session = {"job_id": "j", "train_run": "r", "id": "s"}
    for now in (5, 20, 40):
        assert d.update(_beats(0), [session], now=now) == []
    assert d.update(_beats(0), [], now=45) == []  # continued at ~40: the clock restarts there
    assert len(d.update(_beats(0), [], now=51)) == 1  # stuck for real after the continue


def test_other_runs_and_finished_runs() -> None:
    d = hang.HangDecider(10)
    beats = _beats(0, run="a") + _beats(100, run="b")
    found = d.update(beats, [{"job_id": "j", "train_run": "b"}], now=105)
    assert [f["train_run"] for f in found] == ["a"]
    b_paused = [{"job_id": "j", "train_run": "b"}]
    assert d.update(beats, b_paused, now=120) == []  # "a" fired already
    assert d.update([], [], now=125) == [] and d.runs  # one round without beats: kept
    assert d.update(_beats(0, run="a"), b_paused, now=127) == []  # the same stall: no second event
    assert d.update([], [], now=200) == [] and d.runs == {}  # workers gone: forgotten
    # A non-Train job's idle worker (its task ended) is asked about before it counts.
    job = [{"job_id": "k", "train_run": None, "pid": 3, "ts": 0, "task_id": "t"}]
    assert hang.HangDecider(10).update(job, [], now=20, still_running=lambda k, r: False) == []
    found = hang.HangDecider(10).update(job, [], now=20, still_running=lambda k, r: True)
    assert len(found) == 1 and found[0]["train_run"] is None
    assert hang.message(found[0]) == "job k made no progress for 20s (1 worker(s) calling raydbg.progress() seen)"
    assert hang.message(hang.HangDecider(10).update(_beats(0), [], now=11)[0]) == (
        "Train run r (job j) made no progress for 11s (2 rank(s) seen)")


class _DashboardKv:
    """The one GCS KV read of `dashboard_url`: the dashboard's address, if the cluster has one."""

    def __init__(self, address: bytes | None) -> None:
        self.address = address

    def internal_kv_get(self, key: bytes, ns: bytes, timeout: float = 0) -> bytes | None:
        assert (key, ns) == (b"dashboard", b"dashboard")
        return self.address


@pytest.mark.parametrize("dashboard", [None, b"127.0.0.1:8265"])
def test_a_tasks_state_is_asked_of_this_clusters_own_dashboard(dashboard: bytes | None,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    """With no address Ray's State API asks "the" Ray instance of the machine: the latest
    started, maybe another user's. The gateway names its own cluster's dashboard, or answers
    "unknown" (still running) at once when there is none (Ray would retry for 40 s)."""
    import ray.util.state

    from raydbg import registry
    from raydbg.gang import hang_service

    asked: list[str | None] = []

    def get_task(task_id: str, address: str | None = None, timeout: int = 0) -> Any:
        asked.append(address)
        return types.SimpleNamespace(state="FINISHED")

    monkeypatch.setattr(ray.util.state, "get_task", get_task)
    registry.use_client(_DashboardKv(dashboard))
    try:
        running = hang_service.still_running(("job", ""), [{"task_id": "t1"}])
    finally:
        registry.use_client(None)
    if dashboard is None:
        assert running and asked == []
    else:
        assert not running and asked == ["http://127.0.0.1:8265"]


def test_hang_after_env(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("RAYDBG_HANG_AFTER_S", "7.5")
    assert hang.hang_after_s() == 7.5
    monkeypatch.setenv("RAYDBG_HANG_AFTER_S", "x")
    assert hang.hang_after_s() == hang.DEFAULT_HANG_AFTER_S
    assert hang.check_every_s(300) == 10.0 and hang.check_every_s(1) == 0.5


# --- held ranks in `raydbg list` ---------------------------------------------------------
def test_held_ranks_per_paused_session() -> None:
    from raydbg.gang import ranks

    recs = [{"id": "s0", "job_id": "j", "train_run": "r", "train_rank": 0, "group": None}]
    stacks = {
        "classes": [{"id": "c1", "summary": "all_reduce <- train_step t.py:9"},
                    {"id": "c0", "summary": "paused at breakpoint t.py:8"}],
        "runs": [{"run": "r", "job_id": "j", "world_size": 3, "held_by": [0], "waiting": [1, 2],
                  "ranks": [{"world_rank": 0, "state": "paused", "class_id": "c0"},
                            {"world_rank": 1, "state": "held", "class_id": "c1"},
                            {"world_rank": 2, "state": "held", "class_id": "c1"}]}],
    }
    held = ranks.held_by_session(recs, stacks)
    assert [h["world_rank"] for h in held["s0"]] == [1, 2]
    assert all(h["in_collective"] and h["summary"].startswith("all_reduce") for h in held["s0"])
    recs[0]["held"] = held["s0"]
    lines = ranks.held_lines(recs)
    assert lines == ["  held by rank 0 of run r: ranks 1-2: all_reduce <- train_step t.py:9"]
    grouped = [{"id": f"s{i}", "group": "gabc", "train_run": "r", "train_rank": i, "train_world_size": 2,
                "file": "/x/t.py", "line": 8, "since": 1.0} for i in range(2)]
    assert ranks.held_lines(grouped)[0].startswith("group gabc: ranks 0-1 (2/2) of run r at t.py:8")


def test_tui_reason_cell_names_group_and_held_ranks() -> None:
    from raydbg.tui.format import SESSION_COLUMNS
    from raydbg.tui.sessions import with_gang

    row = tuple(str(i) for i in range(len(SESSION_COLUMNS)))
    assert with_gang(row, {}, None) == row
    held = [{"world_rank": 1}, {"world_rank": 2}, {"world_rank": 3}]
    out = with_gang(row, {"group": "gabc"}, held)
    reason = SESSION_COLUMNS.index("reason")
    assert out[reason] == f"{row[reason]} · group gabc · holds ranks 1-3"
    assert out[:reason] == row[:reason] and out[reason + 1:] == row[reason + 1:]


def test_a_train_step_span_is_progress(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from raydbg import telemetry

    monkeypatch.setenv("RAYDBG_PROGRESS_BASE", str(tmp_path))
    monkeypatch.setattr(progress, "_identity", lambda: {"job_id": "j", "train_run": "r", "world_rank": 0})
    monkeypatch.setattr(progress, "_beat", progress.Beat())
    with telemetry.span("sd.train.data_wait"):
        pass
    assert progress.read_all() == []  # only step spans count
    with telemetry.span("sd.train.step", {"train.step": 5}):
        pass
    [rec] = progress.read_all()
    assert (rec["step"], rec["source"]) == (5, "span")
    with pytest.raises(RuntimeError), telemetry.span("sd.train.step", {"train.step": 6}):
        raise RuntimeError("a failed step is not progress")
    assert progress.read_all()[0]["step"] == 5
    progress._beat.done()


def test_a_rank_that_pauses_after_its_group_was_continued_goes_on(monkeypatch: pytest.MonkeyPatch) -> None:
    import debugpy.server  # noqa: F401  (pydevd on sys.path, as in a paused worker)

    from raydbg import registry
    from raydbg.worker import resume

    monkeypatch.setenv("RAYDBG_RESUME_POLL_S", "0.05")
    kv = FakeGcs()
    registry.use_client(kv)
    try:
        resume.request_group("run-a:/a/train.py:10:1")  # `raydbg continue` of the group, earlier
        for n, sid in enumerate(("late1", "late2")):  # ranks that reach the line only now
            rec = _rec(id=sid, group="run-a:/a/train.py:10:1", train_rank=n)
            assert resume.wait_for_client(rec, timeout=60) == "resumed"
            resume.done(rec)
        other = _rec(id="other", group="run-a:/a/train.py:10:2")  # the next occurrence: a group of its own
        assert resume.wait_for_client(other, timeout=1.0) == "timeout"
        resume.done(other)
        assert registry.keys(resume.RESUME) == [resume.group_key("run-a:/a/train.py:10:1")]  # kept
    finally:
        registry.use_client(None)


HANG_RECORD = """
import asyncio, sys
sys.path.insert(0, {tests!r})
from raydbg import registry, telemetry
from raydbg.telemetry.prometheus import prometheus_text
telemetry.setup("agent")
from doubles import FakeGcs
registry.use_client(FakeGcs())
from raydbg.gang import cluster_view, hang_service

async def no_stacks(**kw):
    raise RuntimeError("no cluster here")

cluster_view.cluster_stacks = no_stacks  # the stacks part needs Ray; the event carries the error
server = type("Server", (), {{"token": "t", "node_id": "n1"}})()
found = {{"job_id": "01000000", "train_run": "run-a", "stalled_for_s": 301.0, "ranks": [{{"world_rank": 0}}, {{"world_rank": 1}}]}}
ev = asyncio.run(hang_service.record(server, found))
assert ev["kind"] == "hang" and ev["details"]["errors"], ev
sys.stdout.write(prometheus_text(node=False).decode())
"""


def test_a_hang_event_counts_in_the_hangs_metric(tmp_path: Path) -> None:
    code = HANG_RECORD.format(tests=str(Path(__file__).resolve().parent))
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OTEL_", "RAYDBG_TELEMETRY"))}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                         env={**env, "RAYDBG_TELEMETRY_DIR": str(tmp_path)})
    assert out.returncode == 0, out.stderr
    lines = [x for x in out.stdout.splitlines() if x.startswith("raydbg_gang_hangs")]
    assert lines == ['raydbg_gang_hangs_total{train="yes"} 1.0'] or (
        len(lines) == 1 and 'train="yes"' in lines[0] and lines[0].endswith(" 1.0")), out.stdout[-2000:]


def test_flight_recorder_on_by_default_users_setting_wins_and_off_switch() -> None:
    from raydbg.worker.train import enable_flight_recorder

    env: dict[str, str] = {}
    assert enable_flight_recorder(env) == "2000" and env["TORCH_FR_BUFFER_SIZE"] == "2000"
    env = {"RAYDBG_FLIGHT_RECORDER": "500"}
    assert enable_flight_recorder(env) == "500" and env["TORCH_FR_BUFFER_SIZE"] == "500"
    env = {"TORCH_FR_BUFFER_SIZE": "64", "RAYDBG_FLIGHT_RECORDER": "500"}
    assert enable_flight_recorder(env) == "64" and env["TORCH_FR_BUFFER_SIZE"] == "64"
    env = {"RAYDBG_FLIGHT_RECORDER": "0"}
    assert enable_flight_recorder(env) is None and "TORCH_FR_BUFFER_SIZE" not in env
