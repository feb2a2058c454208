"""Retry budgets (submit side), the start gate and the service's helpers, without a cluster."""

from __future__ import annotations

import functools
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from doubles import Clock, FakeGcs
from other_user import as_other_user, can_be_other_user

from raydbg import _ray_internals
from raydbg._ray_internals.task_start import MAX_IDS
from raydbg.memory import budgets, service, settings, start_gate
from raydbg.memory.policy import Candidate

GiB = 1 << 30


@pytest.fixture(autouse=True)
def fresh_settings() -> Any:
    """Settings are read once per process: re-read around each test that sets variables."""
    settings.reload()
    yield
    settings.reload()


@pytest.fixture(autouse=True)
def clock(monkeypatch: pytest.MonkeyPatch) -> Clock:
    """No test here reads the wall clock: the gate's waits and tickets run on this one."""
    c = Clock()
    monkeypatch.setattr(start_gate, "_clock", c.monotonic)
    monkeypatch.setattr(start_gate, "_wall", c.time)
    monkeypatch.setattr(start_gate, "_sleep", c.sleep)
    return c


@pytest.fixture(autouse=True)
def run_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("RAYDBG_RUN_DIR", str(tmp_path / "run"))
    (tmp_path / "run").mkdir(mode=0o700)  # private, as raydbg requires of a run dir
    monkeypatch.setattr(start_gate, "_flag_down_until", 0.0)  # no flag seen yet
    monkeypatch.setattr(start_gate, "_flag_view", None)
    monkeypatch.setattr(start_gate, "_flag_inode", 0)
    monkeypatch.setattr(start_gate, "_flag_remap_at", 0.0)
    return tmp_path / "run"


@pytest.fixture(autouse=True)
def own_memory(monkeypatch: pytest.MonkeyPatch) -> None:
    """The gate counts what its own process already holds against the task's need: here that
    process is pytest, grown by whatever ran before this module (CI's suite: over 0.8 GiB,
    and 5 holds below were let in at once). Its own memory is a fixed 0.1 GiB in these tests."""
    from raydbg.memory import node_files

    real = node_files.anon
    own = os.getpid()
    monkeypatch.setattr(
        node_files, "anon", lambda pid, proc=Path("/proc"): GiB // 10 if pid == own else real(pid, proc)
    )


@pytest.fixture
def gcs() -> Any:
    fake = FakeGcs()
    budgets.use_client(fake)
    yield fake
    budgets.use_client(None)


TID = "c2668a65bda616c1ffffffffffffffffffffffff01000000"


def test_keys_group_by_job() -> None:
    assert budgets.key(TID) == f"budget/01000000/{TID}"
    assert budgets.killed_key(TID) == f"killed/01000000/{TID}"


def test_record_flush_lookup_and_prune(gcs: FakeGcs) -> None:
    budgets.record(TID, 0, "mod.f", "parent")
    assert budgets.flush(5)
    got = budgets.lookup([TID, "00" * 24])
    assert list(got) == [TID] and got[TID]["max_retries"] == 0 and got[TID]["parent"] == "parent"
    assert budgets.killed_record(TID) is None
    budgets.mark_killed(TID, 2, "ev1", memory=GiB)
    assert budgets.killed_counts([TID]) == {TID: 2}
    got = budgets.killed_record(TID)
    assert got is not None and (got["kills"], got["event"], got["memory"]) == (2, "ev1", GiB)
    budgets.prune_job("01000000")
    assert budgets.lookup([TID]) == {} and budgets.killed_counts([TID]) == {}
    assert budgets.killed_record(TID) is None


def test_effective_max_retries(monkeypatch: pytest.MonkeyPatch) -> None:
    assert budgets.effective_max_retries({"max_retries": 0}) == 0
    assert budgets.effective_max_retries({"max_retries": -1}) == -1
    monkeypatch.setenv("RAY_TASK_MAX_RETRIES", "7")
    assert budgets.effective_max_retries({}) == 7
    monkeypatch.delenv("RAY_TASK_MAX_RETRIES")
    from ray._common import ray_option_utils

    assert budgets.effective_max_retries({"max_retries": None}) == int(
        ray_option_utils.task_options["max_retries"].default_value
    )


class _Tid:
    def __init__(self, h: str) -> None:
        self.h = h

    def hex(self) -> str:
        return self.h


class _Ref:
    def __init__(self, h: str) -> None:
        self._h = h

    def task_id(self) -> _Tid:
        return _Tid(self._h)


class _Gen:
    """ObjectRefGenerator's public side: `completed()` is its task's ref."""

    def __init__(self, h: str) -> None:
        self.ref = _Ref(h)

    def completed(self) -> _Ref:
        return self.ref


def test_task_id_of_shapes() -> None:
    assert budgets.task_id_of(_Ref("aa")) == "aa"
    assert budgets.task_id_of([_Ref("bb"), _Ref("bb")]) == "bb"
    assert budgets.task_id_of(_Gen("cc")) == "cc"
    assert budgets.task_id_of(None) is None and budgets.task_id_of([]) is None


class _FunctionId:
    def hex(self) -> str:
        return "f00d"


class _Descriptor:
    function_id = _FunctionId()


def test_submit_hook_records_the_function_default_once_and_calls_that_differ(
    gcs: FakeGcs, monkeypatch: pytest.MonkeyPatch
) -> None:
    from ray.remote_function import RemoteFunction

    orig = RemoteFunction._remote
    calls: list[dict[str, Any]] = []
    tids = iter(TID[:-10] + f"{i:02d}" + TID[-8:] for i in range(10))

    def fake_remote(
        self: Any,
        args: Any = None,
        kwargs: Any = None,
        serialized_runtime_env_info: Any = None,
        **opts: Any,
    ) -> Any:
        calls.append(opts)
        return _Ref(next(tids))

    monkeypatch.setattr(RemoteFunction, "_remote", fake_remote)
    monkeypatch.setattr(_ray_internals.task_submit, "_submit", {"after": None, "untraced": None, "done": {}})
    monkeypatch.delenv("RAY_TASK_MAX_RETRIES", raising=False)
    try:
        assert budgets.install_submit_hook() and budgets.install_submit_hook()  # idempotent
        fn = RemoteFunction.__new__(RemoteFunction)
        fn._function_name = "mod.grow"  # type: ignore[attr-defined]
        fn._function_descriptor = _Descriptor()  # type: ignore[assignment]
        fn._default_options = {"max_retries": 2}
        plain = RemoteFunction._remote(fn, args=[1], kwargs={}, max_retries=2).task_id().hex()
        plain2 = RemoteFunction._remote(fn, args=[2], kwargs={}, max_retries=2).task_id().hex()
        zero = RemoteFunction._remote(fn, args=[3], kwargs={}, max_retries=0).task_id().hex()
        assert calls[2] == {"max_retries": 0}
        # The default once, the lowering call at once (no flush): nothing per plain call.
        keys = sorted(k.decode() for k in gcs.data)
        assert keys == [budgets.key(zero), budgets.function_key("01000000", "f00d")]
        more = RemoteFunction._remote(fn, args=[4], kwargs={}, max_retries=-1).task_id().hex()
        assert budgets.flush(5)
        fns = {t: "f00d" for t in (plain, plain2, zero, more)}
        got = budgets.lookup([plain, plain2, zero, more, "00" * 24], fns)
        assert {t: r["max_retries"] for t, r in got.items()} == {
            plain: 2,
            plain2: 2,
            zero: 0,
            more: -1,
        }
        assert got[zero]["name"] == "mod.grow"
        assert budgets.lookup([plain]) == {}  # no function id: unknown
        budgets.uninstall_submit_hook()
        assert RemoteFunction._remote is fake_remote
    finally:
        monkeypatch.setattr(RemoteFunction, "_remote", orig)


def test_submit_hook_skips_calls_it_is_done_with(monkeypatch: pytest.MonkeyPatch) -> None:
    """Once `after` says a function's calls with an option need nothing, later such calls
    skip it; another option, or the function exported anew (a new descriptor), do not."""
    from ray.remote_function import RemoteFunction

    monkeypatch.setattr(RemoteFunction, "_remote", lambda self, *a, **o: _Ref(TID))
    monkeypatch.setattr(_ray_internals.task_submit, "_submit", {"after": None, "untraced": None, "done": {}})
    seen: list[Any] = []

    def after(result: Any, fid: str, fn_opts: Any, opts: dict[str, Any], name: str) -> bool:
        seen.append(opts.get("max_retries"))
        return opts.get("max_retries") != 0  # 0: "a budget that differs", never done

    assert _ray_internals.wrap_task_submit(after)
    try:
        fn = RemoteFunction.__new__(RemoteFunction)
        fn._function_descriptor = _Descriptor()  # type: ignore[assignment]
        fn._default_options = {}
        for opts in ({}, {}, {"max_retries": 0}, {"max_retries": 0}, {}, {"max_retries": 2}):
            RemoteFunction._remote(fn, args=[], kwargs={}, **opts)
        assert seen == [None, 0, 0, 2]  # the memo holds the last option it was done with
        RemoteFunction._remote(fn, args=[], kwargs={}, max_retries=2)
        fn._function_descriptor = _Descriptor()  # type: ignore[assignment]
        RemoteFunction._remote(fn, args=[], kwargs={}, max_retries=2)
        assert seen == [None, 0, 0, 2, 2]
    finally:
        _ray_internals.unwrap_task_submit()


def test_function_default_first_writer_wins(gcs: FakeGcs) -> None:
    assert budgets.function_default("01000000", "f00d", 3) == 3
    budgets._function_defaults.clear()  # another process, whose default differs
    assert budgets.function_default("01000000", "f00d", 1) == 3
    tid = TID
    budgets.record_call(tid, "f00d", 1, 1, "g")  # 1 < the recorded 3: its own record
    assert budgets.lookup([tid], {tid: "f00d"})[tid]["max_retries"] == 1


def test_a_task_of_one_of_several_wrappers_gets_the_smallest_of_their_defaults(gcs: FakeGcs) -> None:
    """A worker that loaded one function under two wrappers (two function ids) cannot tell
    which one a task came from: its record names both; the budget is the smaller default,
    and unknown while one of them is not recorded (never optimistic)."""
    budgets.function_default("01000000", "f00d", 3)
    budgets.function_default("01000000", "beef", 2)
    budgets.function_default("01000000", "abba", -1)
    both = {TID: "f00d beef"}
    assert budgets.lookup([TID], both)[TID]["max_retries"] == 2
    assert budgets.lookup([TID], {TID: "abba f00d"})[TID]["max_retries"] == 3  # -1: no limit
    assert budgets.lookup([TID], {TID: "abba"})[TID]["max_retries"] == -1
    assert budgets.lookup([TID], {TID: "f00d cafe"}) == {}  # cafe's default not recorded
    budgets.record_call(TID, "f00d", 5, 3, "g")  # the task's own record wins
    assert budgets.flush(5)
    assert budgets.lookup([TID], both)[TID]["max_retries"] == 5


def test_wait_until_backs_off_and_gives_up() -> None:
    t = [0.0]
    sleeps: list[float] = []

    def sleep(d: float) -> None:
        sleeps.append(d)
        t[0] += d

    holds: list[int] = []
    waited = start_gate.wait_until(
        lambda: False, 5.0, lambda: holds.append(1), sleep=sleep, clock=lambda: t[0]
    )
    assert sleeps[:5] == [0.02, 0.04, 0.08, 0.16, 0.25] and max(sleeps) == 0.25
    assert 5.0 <= waited < 5.3 and holds == [1]  # on_hold once, before the first pause
    assert start_gate.wait_until(lambda: True, 5.0, sleep=sleep, clock=lambda: t[0]) == 0.0


def test_fits() -> None:
    assert start_gate.fits(GiB, lambda: (2 * GiB, 4 * GiB))
    assert not start_gate.fits(2 * GiB, lambda: (2 * GiB, 4 * GiB))


def test_before_task_holds_a_retry_after_a_raydbg_kill(
    monkeypatch: pytest.MonkeyPatch, gcs: FakeGcs, capsys: pytest.CaptureFixture[str], run_dir: Path
) -> None:
    from raydbg.memory import node_files

    budgets.mark_killed(TID, 1, "ev42", memory=GiB)
    used = [int(3.2 * GiB)]
    monkeypatch.setattr(start_gate, "node_memory", lambda: (used[0], 4 * GiB))
    held: list[bool] = []

    def sleep(d: float) -> None:
        # 3.2 + 1 GiB does not fit under 85% of 4 GiB: held, and the record says so.
        held.append(node_files.read_running([os.getpid()])[os.getpid()]["held"])
        used[0] = 2 * GiB  # 2 + 1 fits

    monkeypatch.setattr(start_gate, "_sleep", sleep)
    start_gate.before_task(TID, 1, "grow")
    assert held == [True] and "event ev42" in capsys.readouterr().err
    rec = node_files.read_running([os.getpid()])[os.getpid()]
    assert (rec["task_id"], rec["attempt"], rec["name"], rec["job_id"], rec["held"]) == (
        TID,
        1,
        "grow",
        "01000000",
        False,
    )
    # Admitted: the room stays reserved until the task returns.
    assert (run_dir / f"reserve-{os.getpid()}").read_text() == str(GiB)
    start_gate.release()
    assert not (run_dir / f"reserve-{os.getpid()}").exists()


def _peaks(run_dir: Path, table: dict[str, int]) -> Any:
    from raydbg.memory.learn import PeakTable

    run_dir.mkdir(parents=True, exist_ok=True)
    (run_dir / "peaks-n1").write_text(json.dumps({"peaks": table, "complete": sorted(table)}))
    return PeakTable(run_dir / "peaks-n1")


def test_before_task_holds_a_big_function_until_its_learned_peak_fits(
    monkeypatch: pytest.MonkeyPatch, run_dir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from raydbg.memory import node_files

    monkeypatch.setattr(start_gate, "_peaks", _peaks(run_dir, {"f00d": GiB}))
    monkeypatch.setattr(start_gate, "node_memory", lambda: (2 * GiB, 4 * GiB))
    other = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    try:
        # Another admitted task of the function has ~1 GiB still to grow into: 2 GiB used
        # + ~1 GiB of ours + ~1 GiB of its > 85% of 4 GiB.
        (run_dir / f"reserve-{other.pid}").write_text(str(GiB))
        held: list[bool] = []

        def sleep(d: float) -> None:
            held.append(node_files.read_running([os.getpid()])[os.getpid()]["held"])
            other.kill()  # it returned: its reservation is gone with it
            other.wait()

        monkeypatch.setattr(start_gate, "_sleep", sleep)
        start_gate.before_task(TID, 0, "grow", "f00d")
        assert held == [True]
        assert (run_dir / f"reserve-{os.getpid()}").read_text() == str(GiB)
        assert not node_files.read_running([os.getpid()])[os.getpid()]["held"]
        start_gate.release()
        # A function not learned to be big takes the cheap path: no reservation.
        monkeypatch.setattr(start_gate, "_sleep", lambda d: pytest.fail("held"))
        start_gate.before_task(TID, 0, "small", "beef")
        assert not (run_dir / f"reserve-{os.getpid()}").exists()
    finally:
        other.kill()
        other.wait()


def test_before_task_holds_fresh_starts_while_memory_trends_up_then_admits_the_learned_peak(
    monkeypatch: pytest.MonkeyPatch, run_dir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from raydbg.memory import node_files

    flag = node_files.flag_path("n1", run_dir)
    node_files.set_flag(flag, True, f"{2 * GiB} {4 * GiB} trend")  # the monitor: heading up
    table = _peaks(run_dir, {})
    monkeypatch.setattr(start_gate, "_flag", flag)
    monkeypatch.setattr(start_gate, "_peaks", table)
    monkeypatch.setattr(start_gate, "node_memory", lambda: (2 * GiB, 4 * GiB))
    held: list[bool] = []

    real_wait = start_gate.wait_until

    def wait(ok: Any, hold_s: float, on_hold: Any) -> float:
        if held:  # the admission that follows the hold
            return real_wait(ok, hold_s, on_hold)
        on_hold()
        held.append(node_files.read_running([os.getpid()])[os.getpid()]["held"])
        assert not ok()  # held while the trend flag is up
        # Meanwhile the monitor learned the function's peak and the growth stopped.
        (run_dir / "peaks-n1").write_text(json.dumps({"peaks": {"f00d": GiB}}))
        table._checked = -1e9
        flag.unlink()
        assert ok()
        return 1.5

    monkeypatch.setattr(start_gate, "wait_until", wait)
    start_gate.before_task(TID, 0, "grow", "f00d")
    assert held == [True]
    # Looked up after the hold: admitted with the peak the hold taught, and reserved.
    assert (run_dir / f"reserve-{os.getpid()}").read_text() == str(GiB)
    assert not node_files.read_running([os.getpid()])[os.getpid()]["held"]
    assert "held 1.5s" in capsys.readouterr().err
    start_gate.release()


def test_admit_does_not_go_alone_while_a_task_of_the_same_function_runs(
    monkeypatch: pytest.MonkeyPatch, run_dir: Path, clock: Clock
) -> None:
    from raydbg.memory import node_files

    # A worker titled ray::grow whose record says it runs f00d: it will return, and free.
    other = subprocess.Popen(["bash", "-c", "exec -a ray::grow sleep 30"])
    try:
        node_files.write_running("t", 0, "grow", "j", run_dir, function_id="f00d")
        os.replace(run_dir / str(os.getpid()), run_dir / str(other.pid))
        for _ in range(100):  # until bash has exec'd
            if start_gate.siblings("f00d"):
                break
            time.sleep(0.02)
        assert start_gate.siblings("f00d") == 1 and start_gate.siblings("beef") == 0
        sleeps = clock.sleeps
        read = lambda: (int(3.0 * GiB), 4 * GiB)  # noqa: E731  below the high mark (3.5)
        start_gate.admit(GiB, False, 0.2, read=read, function_id="f00d")
        assert sleeps  # not alone: waited for the sibling
        start_gate.release()
        sleeps.clear()
        start_gate.admit(GiB, False, 0.2, read=read, function_id="beef")
        assert not sleeps  # nothing of its kind runs: waiting would free nothing
        start_gate.release()
    finally:
        other.kill()
        other.wait()


def test_a_learned_peak_fits_under_the_high_mark_a_killed_attempts_memory_under_the_low(
    clock: Clock,
) -> None:
    sleeps = clock.sleeps
    # 24.5 + 10 GiB (less this process's own ~0.1 GiB) of 40: ~86%, between the low (85%)
    # and the high mark (87.5%).
    read = lambda: (int(24.5 * GiB), 40 * GiB)  # noqa: E731
    start_gate.admit(10 * GiB, True, 60, read=read, learned=True)
    assert sleeps == []
    start_gate.release()
    start_gate.admit(10 * GiB, True, 0.2, read=read, learned=False)
    assert sleeps
    start_gate.release()


def test_only_a_complete_learned_peak_is_admitted_under_the_high_mark(
    monkeypatch: pytest.MonkeyPatch, run_dir: Path
) -> None:
    from raydbg.memory.learn import PeakTable

    run_dir.mkdir(parents=True, exist_ok=True)
    peaks = {"f00d": GiB, "beef": GiB}
    (run_dir / "peaks-n1").write_text(json.dumps({"peaks": peaks, "complete": ["f00d"]}))
    monkeypatch.setattr(start_gate, "_peaks", PeakTable(run_dir / "peaks-n1"))
    seen: dict[str, bool] = {}
    monkeypatch.setattr(
        start_gate,
        "admit",
        lambda room, strict, hold, on_hold, **kw: (
            seen.update({kw["function_id"]: kw["learned"]}) or 0.0
        ),
    )
    start_gate.before_task(TID, 0, "grow", "f00d")
    start_gate.before_task(TID, 0, "grow", "beef")
    assert seen == {"f00d": True, "beef": False}


def test_a_held_task_moves_to_the_high_mark_once_its_functions_peak_is_complete(
    monkeypatch: pytest.MonkeyPatch, run_dir: Path
) -> None:
    """A task that entered the gate while its function's peak was still incomplete (no task
    of it had ended yet) waits under the low mark; once a task ends and the peak is
    complete, the same room is admitted under the high mark, as a later start would be
    (else it held its CPU while a later start took the room: waves ran 2 at a time, not 3)."""
    from raydbg.memory.learn import PeakTable

    need = int(3.5 * GiB)
    peaks = run_dir / "peaks-n1"
    run_dir.mkdir(parents=True, exist_ok=True)
    peaks.write_text(json.dumps({"peaks": {"f00d": need}, "complete": []}))
    monkeypatch.setattr(start_gate, "_peaks", PeakTable(peaks, every_s=0))
    # 40 GiB node: low mark 34 GiB, high 35 GiB. 30 used + 3.5 ours + ~1 another admitted
    # task has still to allocate = ~34.5: above the low mark, under the high one.
    monkeypatch.setattr(start_gate, "node_memory", lambda: (30 * GiB, 40 * GiB))
    other = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    pauses: list[float] = []

    def pause(seconds: float) -> None:
        pauses.append(seconds)
        assert len(pauses) < 20, "never admitted after the peak was complete"
        if len(pauses) == 3:  # a task of the function ended on its own: the peak is complete
            peaks.write_text(json.dumps({"peaks": {"f00d": need}, "complete": ["f00d"]}))

    monkeypatch.setattr(start_gate, "_sleep", pause)
    try:
        (run_dir / f"reserve-{other.pid}").write_text(str(GiB))
        start_gate.admit(need, False, 60.0, function_id="f00d", learned=False)
        assert len(pauses) == 3  # held under the low mark, in under the high mark at once after
    finally:
        other.kill()
        other.wait()
        start_gate.release()


def test_admit_alone_goes_below_the_high_mark_and_waits_above_it(
    run_dir: Path, clock: Clock
) -> None:
    # No other admitted task: nothing to wait for below the high mark (87.5%).
    sleeps = clock.sleeps
    assert start_gate.admit(3 * GiB, False, 60, read=lambda: (int(3.4 * GiB), 4 * GiB)) == 0.0
    assert sleeps == []
    start_gate.release()
    # A retry after a kill (strict) waits for its room, up to the longest hold.
    start_gate.admit(3 * GiB, True, 0.3, read=lambda: (int(3.4 * GiB), 4 * GiB))
    assert len(sleeps) >= 1
    start_gate.release()
    # Above the high mark a big function's task waits too.
    sleeps.clear()
    start_gate.admit(3 * GiB, False, 0.3, read=lambda: (int(3.6 * GiB), 4 * GiB))
    assert len(sleeps) >= 1
    start_gate.release()


def test_before_task_lets_fresh_attempts_run_when_calm(monkeypatch: pytest.MonkeyPatch) -> None:
    from raydbg.memory import node_files

    monkeypatch.setattr(start_gate, "node_memory", lambda: (GiB, 4 * GiB))
    monkeypatch.setattr(start_gate, "wait_until", lambda *a, **k: pytest.fail("held"))
    start_gate.before_task(TID, 0, "calm")
    # The gate swallows its own errors: that it ran is in the record it wrote, not held.
    rec = node_files.read_running([os.getpid()])[os.getpid()]
    assert (rec["task_id"], rec["attempt"], rec["name"], rec["held"]) == (TID, 0, "calm", False)
    monkeypatch.setenv("RAYDBG_MEMORY_MONITOR", "off")
    settings.reload()
    monkeypatch.setattr(start_gate.node_files, "record", lambda: pytest.fail("gate ran while off"))
    start_gate.before_task(TID, 0)


def test_before_task_reads_one_byte_of_the_mapped_flag_while_it_is_down(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    from raydbg.memory import node_files

    flag = node_files.flag_path("n1", tmp_path)
    monkeypatch.setattr(start_gate, "_flag", flag)
    monkeypatch.setattr(
        start_gate, "node_memory", lambda: pytest.fail("memory read without the flag")
    )
    start_gate.before_task(TID, 0, "grow", "f00d")  # no monitor yet: no flag, counts as down
    rec = node_files.read_running([os.getpid()])[os.getpid()]
    assert (rec["fn"], rec["held"]) == ("f00d", False)
    with monkeypatch.context() as m:  # looked for at most once per FLAG_RECHECK_S
        m.setattr(node_files, "map_flag", lambda path: pytest.fail("looked within the recheck time"))
        start_gate.before_task(TID, 0, "grow", "f00d")
    node_files.set_flag(flag, False)  # the monitor started
    monkeypatch.setattr(start_gate, "_flag_down_until", 0.0)  # the recheck time is over
    start_gate.before_task(TID, 0, "grow", "f00d")
    assert start_gate._flag_view is not None  # mapped from now on
    with monkeypatch.context() as m:  # down: one byte of shared memory, no file read
        m.setattr(node_files, "_read_flag", lambda path: pytest.fail("flag file read while down"))
        start_gate.before_task(TID, 0, "grow", "f00d")
    node_files.set_flag(flag, True, "x")  # the monitor: above the high mark; seen at once
    monkeypatch.setattr(start_gate, "node_memory", lambda: (int(3.9 * GiB), 4 * GiB))
    held: list[float] = []
    monkeypatch.setattr(start_gate, "wait_until", lambda ok, hold, on_hold: held.append(hold) or 0.2)
    start_gate.before_task(TID, 0, "grow", "f00d")
    assert held
    flag.write_bytes(b"1 1.000 1 2 memory".ljust(node_files.FLAG_SIZE))  # a monitor that died with it up
    monkeypatch.setattr(start_gate, "node_memory", lambda: pytest.fail("stale flag trusted"))
    start_gate.before_task(TID, 0, "grow", "f00d")


def test_a_flag_file_made_again_is_mapped_again(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    from raydbg.memory import node_files

    flag = node_files.flag_path("n1", tmp_path)
    monkeypatch.setattr(start_gate, "_flag", flag)
    node_files.set_flag(flag, False)
    assert start_gate.under_pressure() == "" and start_gate._flag_view is not None
    old = start_gate._flag_view
    flag.unlink()  # the run dir removed and made again, a monitor started in it
    node_files.set_flag(flag, True, f"{3 * GiB} {4 * GiB} trend")
    assert start_gate.under_pressure() == ""  # within FLAG_REMAP_S: the old map, down
    monkeypatch.setattr(start_gate, "_flag_remap_at", 0.0)  # FLAG_REMAP_S later
    assert start_gate.under_pressure() == "trend" and start_gate._flag_view is not old
    assert start_gate._flag_inode == flag.stat().st_ino


def test_the_flag_keeps_its_size_and_file(tmp_path: Path) -> None:
    """Workers keep the flag mapped: the monitor rewrites it in place, never shorter."""
    from raydbg.memory import node_files

    flag = node_files.flag_path("n1", tmp_path)
    assert node_files.map_flag(flag) is None and not node_files.flag_up(flag)
    node_files.set_flag(flag, False)
    view, inode = node_files.map_flag(flag) or pytest.fail("not mapped")
    assert view[0] == 0 and inode == flag.stat().st_ino == node_files.inode(flag)
    node_files.set_flag(flag, True, "1 2 trend")
    assert view[0] and node_files.flag_reason(flag) == "trend"
    node_files.set_flag(flag, True, "1 2 " + "m" * 200)  # too long: cut, not grown
    node_files.set_flag(flag, False)
    assert view[0] == 0 and not node_files.flag_up(flag) and node_files.flag_reason(flag) == ""
    assert (flag.stat().st_ino, flag.stat().st_size) == (inode, node_files.FLAG_SIZE)


def test_before_task_hands_out_a_quick_path_only_when_calm(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, clock: Clock
) -> None:
    from raydbg.memory import node_files

    flag = node_files.flag_path("n1", tmp_path)
    monkeypatch.setattr(start_gate, "_flag", flag)
    # No monitor yet: a ticket as long as the flag counts as down, with a flag that stays so.
    until, field, seen = start_gate.before_task(TID, 0, "grow", "f00d") or pytest.fail("no quick path")
    start = node_files.read_running([os.getpid()])[os.getpid()]["start"]
    assert until == pytest.approx(start + start_gate.FLAG_RECHECK_S) and not seen[0]
    other = TID[:-12] + "ab" * 2 + TID[-8:]
    field[:] = other.encode()  # what the wrapper does for the next such task
    rec = node_files.read_running([os.getpid()])[os.getpid()]
    assert (rec["task_id"], rec["attempt"], rec["held"], rec["fn"], rec["name"], rec["start"]) == (
        other, 0, False, "f00d", "grow", start)
    assert start_gate.before_task(TID, 1, "grow", "f00d") is None  # a retry: always the full gate
    assert start_gate.before_task("t1", 0, "grow", "f00d") is None  # not a Ray task id
    # The monitor's flag: a ticket of TICKET_S whose flag is the mapped one, up at once.
    node_files.set_flag(flag, False)
    monkeypatch.setattr(start_gate, "_flag_down_until", 0.0)
    until, field, seen = start_gate.before_task(TID, 0, "grow", "f00d") or pytest.fail("no quick path")
    start = node_files.read_running([os.getpid()])[os.getpid()]["start"]
    assert until == start + start_gate.TICKET_S  # from the record's start: never older than that
    assert not seen[0]
    node_files.set_flag(flag, True, "1 2 trend")
    assert seen[0]  # the wrapper's next look sees it: no quick path from here
    monkeypatch.setattr(start_gate, "wait_until", lambda ok, hold, on_hold: 0.0)
    assert start_gate.before_task(TID, 0, "grow", "f00d") is None  # pressure: no quick path


class _TaskId:
    def __init__(self, n: int) -> None:
        self.n = n

    def hex(self) -> str:
        return f"{self.n:040x}" + TID[-8:]


class _IdField:
    """A record's task id field, as the quick path writes it: what was written."""

    def __init__(self) -> None:
        self.written: list[str] = []

    def __setitem__(self, where: slice, raw: bytes) -> None:
        assert where == slice(None) and len(raw) == 48
        self.written.append(raw.decode())


class _Core:
    """Ray's core worker as the gate asks it: the running task's function and name."""

    def __init__(self, fn: str, name: str) -> None:
        self.current = {"fn": fn, "name": name}
        self.function_name_calls = 0

    def get_current_task_function_name(self) -> str:
        self.function_name_calls += 1
        return self.current["fn"]

    def get_current_task_name(self) -> str:
        return self.current["name"]


class _Worker:
    """Ray's global worker as the gate wraps it: Ray's own start and end of each task."""

    actors: dict[str, Any] = {}

    def __init__(self, core: _Core) -> None:
        self.core_worker = core
        self.started: list[int] = []

    def record_task_log_start(self, task_id: Any, attempt: int) -> None:
        self.started.append(task_id.n)

    def record_task_log_end(self, task_id: Any, attempt: int) -> None:
        pass


class _FnDescriptor:
    """A function descriptor of module `m` (`fn`: what its execution info runs)."""

    module_name, class_name = "m", ""

    def __init__(self, fid: str, name: str, actor: bool = False, fn: Any = len) -> None:
        self.function_id = type("Id", (), {"hex": lambda _: fid})()
        self.function_name = name
        self.actor = actor
        self.fn = fn

    def is_actor_method(self) -> bool:
        return self.actor


def _stand_in_worker(monkeypatch: pytest.MonkeyPatch, fn: str, name: str) -> _Worker:
    """Ray's global worker and its function manager replaced by stand-ins (restored after)."""
    import ray
    from ray._private.function_manager import FunctionActorManager

    worker = _Worker(_Core(fn, name))
    monkeypatch.setattr(ray._private.worker, "global_worker", worker)
    monkeypatch.setattr(FunctionActorManager, "get_execution_info",
                        lambda self, job, d: type("Info", (), {"function": d.fn})())
    return worker


def test_the_wrapper_takes_the_quick_path_for_the_same_function_and_name(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """_ray_internals.gate_task_functions against a stand-in for Ray's worker: `before` runs
    for a first task, a new function or name, a retry, once its ticket ran out or while
    the flag is up; else only the id into the ticket's field. The function-name getter
    (the costly one) runs on the full path only, and on the quick path of a name two
    functions share. A worker that becomes an actor's gets Ray's own start back."""
    from ray._private.function_manager import FunctionActorManager

    w = _stand_in_worker(monkeypatch, "m.grow", "grow")
    current, started = w.core_worker.current, w.started
    full: list[tuple[str, int, str, str]] = []
    field = _IdField()
    quick = field.written
    until = [time.time() + 60]
    flag = bytearray(1)  # the node's pressure flag, as the gate maps it: 0 while down

    def before(tid: str, attempt: int, name: str, fid: str) -> Any:
        full.append((tid, attempt, name, fid))
        return (until[0], field, flag) if attempt == 0 else None

    ended: list[int] = []  # tasks `after` ran for
    assert _ray_internals.gate_task_functions(before, lambda: ended.append(len(started) - 1))

    def task(n: int, attempt: int = 0) -> None:  # what Ray's execute_task calls around one
        w.record_task_log_start(_TaskId(n), attempt)
        w.record_task_log_end(_TaskId(n), attempt)

    FunctionActorManager.get_execution_info(None, None, _FnDescriptor("f00d", "grow"))  # Ray's first look
    for n in range(3):
        task(n)
    assert w.core_worker.function_name_calls == 1  # the default name alone stood for the function
    current["name"] = "grow-2"  # options(name=...)
    task(3)
    task(4, 1)  # a retry
    until[0] = 0.0  # tickets out of date at once
    task(5)
    task(6)
    until[0] = time.time() + 60
    task(7)
    task(8)
    flag[0] = ord("1")  # the monitor raised the flag
    task(9)
    flag[0] = 0
    task(10)
    # A second function, called with the first one's default name: its first task here
    # takes the full path, which finds the name shared; from then on the name alone is
    # not enough.
    FunctionActorManager.get_execution_info(None, None, _FnDescriptor("beef", "shrink"))
    current.update(fn="m.shrink", name="grow")
    task(11)
    task(12)
    current["fn"] = "m.grow"
    task(13)
    assert started == list(range(14))  # Ray's own record, every time
    assert ended == [int(t[:40], 16) for t, *_ in full]  # `after` for each `before`, only
    assert w.record_task_log_end.__func__ is _Worker.record_task_log_end  # Ray's own between tasks
    assert [int(t[:40], 16) for t, *_ in full] == [0, 3, 4, 5, 6, 7, 9, 11, 13]
    assert [int(t[:40], 16) for t in quick] == [1, 2, 8, 10, 12]
    assert full[0][2:] == ("grow", "f00d") and full[1][2] == "grow-2"
    assert [f[3] for f in full[-2:]] == ["beef", "f00d"]  # each named for its own function
    # The worker becomes an actor's: Ray's own start from then on, no raydbg call per task.
    FunctionActorManager.get_execution_info(None, None, _FnDescriptor("cafe", "Probe.pid", actor=True))
    assert w.record_task_log_start.__func__ is _Worker.record_task_log_start
    task(14)
    assert started[-1] == 14 and len(full) == 9 and len(quick) == 5


def test_a_function_wrapped_twice_stays_gated_and_its_tasks_name_both_ids(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """`ray.remote(f)` made twice (each wrapper its own function id: Ray Data makes one per
    dataset) loads one function under two ids in a worker that runs both: its tasks keep
    their gate and record (the monitor knows their name and task id), naming both ids. A
    different function under the same module and name goes ungated rather than mixed up."""
    from ray._private.function_manager import FunctionActorManager

    w = _stand_in_worker(monkeypatch, "m.nap", "nap")
    current = w.core_worker.current

    def nap() -> None:
        pass

    def other_nap() -> int:  # same module and name as far as Ray says, other code
        return 1

    @functools.wraps(nap)
    def traced_nap() -> None:  # a wrapper that keeps __wrapped__ (Ray's tracing does)
        nap()

    full: list[tuple[str, str]] = []

    def before(tid: str, attempt: int, name: str, fid: str) -> Any:
        full.append((name, fid))
        return None  # no ticket: every task takes the full path

    assert _ray_internals.gate_task_functions(before, lambda: None)

    def task(n: int) -> None:
        w.record_task_log_start(_TaskId(n), 0)
        w.record_task_log_end(_TaskId(n), 0)

    look = FunctionActorManager.get_execution_info
    look(None, None, _FnDescriptor("f00d", "nap", fn=nap))
    task(0)
    look(None, None, _FnDescriptor("beef", "nap", fn=traced_nap))  # ray.remote(max_retries=2)(nap)
    current["name"] = "Nap Named(x.y)"  # .options(name=...)
    task(1)
    look(None, None, _FnDescriptor("f00d", "nap", fn=nap))  # the first one again: nothing new
    task(2)
    assert full == [("nap", "f00d"), ("Nap Named(x.y)", "f00d beef"), ("Nap Named(x.y)", "f00d beef")]
    look(None, None, _FnDescriptor("cafe", "nap", fn=other_nap))
    task(3)
    assert len(full) == 3  # ungated: two functions under one key
    # Past MAX_IDS wrappers of one function, its tasks go ungated too (their records would
    # grow without end, a Ray Data worker's with every dataset).
    current.update(fn="m.many", name="many")
    for i in range(MAX_IDS + 1):
        look(None, None, _FnDescriptor(f"{i:04x}", "many", fn=nap))
        task(10 + i)
    assert [fid.count(" ") + 1 for _, fid in full[3:]] == list(range(1, MAX_IDS + 1))


def test_lower_oom_score(tmp_path: Path) -> None:
    (tmp_path / "oom_score_adj").write_text("1000")
    assert service.lower_oom_score(tmp_path) == -1000
    real = service.lower_oom_score()  # -1000 with CAP_SYS_RESOURCE, else the lowest allowed
    assert real <= 0 and int(Path("/proc/self/oom_score_adj").read_text()) == real


RAISE_PRIORITY = """
import threading
from raydbg.memory import service
got = service.raise_cpu_priority()
seen = []
t = threading.Thread(target=lambda: seen.append(open(f"/proc/self/task/{threading.get_native_id()}/stat").read()))
t.start(); t.join()
print(got, seen[0].rsplit(")", 1)[1].split()[16])  # stat's field 19, nice
"""


@can_be_other_user
def test_the_monitor_raises_its_cpu_priority_where_allowed() -> None:
    # In a child process each time: the test's own priority stays as it is.
    root = subprocess.run([sys.executable, "-c", RAISE_PRIORITY], capture_output=True, text=True, check=True)
    assert root.stdout.split() == [str(service.MONITOR_NICENESS)] * 2  # a later thread inherits it
    ours = os.getpriority(os.PRIO_PROCESS, 0)
    assert as_other_user(lambda: str(service.raise_cpu_priority())) == str(ours)  # no CAP_SYS_NICE: unchanged


def test_worker_log_line_appends_to_the_workers_stderr_file(tmp_path: Path) -> None:
    log = tmp_path / "worker-abc-01000000-1.err"
    with open(log, "w") as err:
        p = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"], stderr=err)
    try:
        assert service.worker_log_line(p.pid, "raydbg: killed (event e1)")
        assert log.read_text() == "raydbg: killed (event e1)\n"
        assert not service.worker_log_line(os.getpid() + 10_000_000, "x")
    finally:
        p.kill()
        p.wait()


def test_recorder_writes_event_with_monitor_id_and_marks_kill() -> None:
    class Reg:
        EVENT = "event/"

        def __init__(self) -> None:
            self.puts: dict[str, Any] = {}

        def put(self, key: str, value: Any) -> None:
            self.puts[key] = value

    class Bud:
        marked: list[tuple[Any, ...]] = []

        def mark_killed(self, *a: Any) -> None:
            self.marked.append(a)

    reg, bud = Reg(), Bud()
    rec = service.Recorder(reg, bud)
    ev = {
        "id": "ab12",
        "ts": 1700000000.5,
        "kind": "memory.kill",
        "node_id": "n",
        "message": "m",
        "details": {},
    }
    rec.record_event(ev)
    assert list(reg.puts) == ["event/001700000000500-ab12"] and json.dumps(
        reg.puts["event/001700000000500-ab12"]
    )
    rec.on_kill(Candidate(pid=1, memory=GiB, task_id="t1", prior_kills=1), ev)
    rec.on_kill(Candidate(pid=2, memory=GiB, task_id="t2"), {**ev, "kind": "memory.dry-run"})
    peak = {**ev, "details": {"victim": {"expected_peak": 2 * GiB}}}
    rec.on_kill(Candidate(pid=3, memory=GiB, task_id="t3"), peak)
    assert bud.marked == [("t1", 2, "ab12", GiB), ("t3", 1, "ab12", 2 * GiB)]


def test_reservations_count_what_admitted_retries_have_not_allocated_yet(
    run_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from raydbg.memory import node_files

    run_dir.mkdir(parents=True, exist_ok=True)
    other = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    try:
        (run_dir / f"reserve-{other.pid}").write_text(str(GiB))
        (run_dir / "reserve-999999999").write_text(str(GiB))  # gone: dropped
        node_files.reserve(5 * GiB)  # this process's own: never counted against itself
        got = node_files.reserved()
        assert GiB - 64 * 1024 * 1024 < got < GiB  # minus the sleeper's own anon memory
        assert not (run_dir / "reserve-999999999").exists()
        # The gate counts it: 2 GiB used + 1 GiB room + ~1 GiB reserved > 85% of 4 GiB.
        assert start_gate.fits(GiB, lambda: (GiB, 4 * GiB))
        assert not start_gate.fits(GiB, lambda: (2 * GiB, 4 * GiB))
        node_files.release()
        assert not (run_dir / f"reserve-{os.getpid()}").exists()
    finally:
        other.kill()
        other.wait()


ADMIT_ONE = """
import os, sys, time
sys.path.insert(0, {repo!r})
from raydbg.memory import node_files, start_gate
GiB = 1 << 30
here = os.environ["RAYDBG_RUN_DIR"]

def read():
    # Each look at the node waits (up to 1.5 s) for the other start to be looking too: two
    # starts not kept apart by the admission lock meet here and decide on the same room.
    open(os.path.join(here, f"looking-{{os.getpid()}}"), "w").close()
    deadline = time.monotonic() + 1.5
    while len([n for n in os.listdir(here) if n.startswith("looking-")]) < 2 and time.monotonic() < deadline:
        time.sleep(0.01)
    return 2 * GiB, 4 * GiB

real_reserve = node_files.reserve

def slow_reserve(nbytes, directory=None):
    time.sleep(0.3)  # between the check and the reservation: the window the lock closes
    real_reserve(nbytes, directory)

node_files.reserve = slow_reserve

class Held(Exception):
    pass

def on_hold():
    raise Held  # the first check found no room: that is all this test asks

print("ready", flush=True)
sys.stdin.readline()  # both go at once
try:
    start_gate.admit(GiB, True, 60.0, on_hold, read=read)
    print("admitted", flush=True)
except Held:
    print("held", flush=True)
sys.stdin.readline()  # keep the reservation until both have answered
"""


def test_two_starts_at_once_do_not_take_the_same_room(run_dir: Path) -> None:
    """2 GiB used of 4: room under the low mark for one 1 GiB start, not two. The admission
    lock makes the second see the first's reservation."""
    code = ADMIT_ONE.format(repo=str(Path(__file__).resolve().parents[1]))
    env = {**os.environ, "RAYDBG_RUN_DIR": str(run_dir)}
    starts = [subprocess.Popen([sys.executable, "-c", code], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                               text=True, env=env) for _ in range(2)]
    try:
        for p in starts:  # both imported and waiting
            assert p.stdout is not None and p.stdout.readline().strip() == "ready"
        for p in starts:
            assert p.stdin is not None
            p.stdin.write("go\n")
            p.stdin.flush()
        answers = sorted(p.stdout.readline().strip() for p in starts if p.stdout is not None)
        assert answers == ["admitted", "held"], answers
    finally:
        for p in starts:
            p.kill()
            p.wait()


@pytest.mark.parametrize("learn", ["1", "0"])
def test_memory_learn_off_does_not_hold_a_function_learned_to_be_big(
    learn: str, monkeypatch: pytest.MonkeyPatch, run_dir: Path, clock: Clock
) -> None:
    """The worker's set-up reads RAYDBG_MEMORY_LEARN: on, a start of a function whose learned
    peak does not fit is held; off, it starts at once (the monitor still kills as before)."""
    from raydbg.memory import worker_tasks

    monkeypatch.setenv("RAYDBG_MEMORY_LEARN", learn)
    settings.reload()
    _peaks(run_dir, {"f00d": 2 * GiB})  # this node learned that f00d's tasks reach 2 GiB
    monkeypatch.setattr(worker_tasks, "node_id_of_self", lambda: "n1")
    # Ray's hook points (submit and task start) stay as they are: only the gate's state is set up.
    monkeypatch.setattr(budgets, "install_submit_hook", lambda: True)
    monkeypatch.setattr(start_gate, "install", lambda: True)
    monkeypatch.setattr(start_gate, "_peaks", None)
    monkeypatch.setattr(start_gate, "_flag", None)
    start_gate.worker_setup()
    monkeypatch.setattr(start_gate, "node_memory", lambda: (2 * GiB, 4 * GiB))
    other = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    try:
        # Another admitted task has ~1 GiB still to take: 2 used + 2 learned + 1 > the high
        # mark (3.5 of 4 GiB); without the learned peak the node is calm (3 < 3.5).
        (run_dir / f"reserve-{other.pid}").write_text(str(GiB))
        start_gate.before_task(TID, 0, "grow", "f00d")
        start_gate.release()
    finally:
        other.kill()
        other.wait()
    assert (clock.sleeps != []) == (learn == "1"), clock.sleeps[:3]
