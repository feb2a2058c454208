"""Train gangs on a real cluster (gloo, CPU): a pause outlives a short collective timeout (and kills
the run without raydbg's raise of it), pause-all groups continue as one, held ranks are listed, and
hang events fire for stuck runs (Train or a job's `raydbg.progress()`) only."""

from __future__ import annotations

import asyncio
import json
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from cluster import needs_torch

from e2e import gang_targets as targets
from e2e.conftest import Cluster, attach_and_inspect, forward, wait_for_session, wait_gone
from e2e.history_support import history, shown_until

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(600), needs_torch]

COLLECTIVE_TIMEOUT_S = 3
HANG_AFTER_S = 6.0
TIMED_OUT = "Timed out waiting 3000ms"  # gloo's message when a collective's timeout runs out


@pytest.fixture(scope="module")
def history_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The jobs' records (raydbg history) of this module's cluster."""
    return tmp_path_factory.mktemp("history")


@pytest.fixture(scope="module")
def cluster(history_dir: Path) -> Iterator[tuple[Cluster, Any]]:
    env = {"RAYDBG_WAIT_TIMEOUT": "300", "RAYDBG_HANG_AFTER_S": str(HANG_AFTER_S), "RAYDBG_RESUME_POLL_S": "0.25",
           "RAYDBG_HISTORY": str(history_dir), **targets.TRAIN_CLUSTER_ENV}
    with Cluster(num_cpus=8, env=env, by_value=(targets,)) as c:
        yield c, c.up()


def _trainer(fn: Any, name: str, tmp_path: Path, workers: int = 2, config: dict[str, Any] | None = None,
             timeout_s: int = COLLECTIVE_TIMEOUT_S, env: dict[str, str] | None = None) -> Any:
    """env: set in this run's workers only (RunConfig.worker_runtime_env), as a user would for one run."""
    from ray.train import RunConfig, ScalingConfig
    from ray.train.torch import TorchConfig, TorchTrainer

    out = tmp_path / f"out-{name}"
    out.mkdir()
    return TorchTrainer(
        fn,
        train_loop_config={**(config or {}), "out": str(out)},
        torch_config=TorchConfig(backend="gloo", timeout_s=timeout_s),
        scaling_config=ScalingConfig(num_workers=workers, use_gpu=False, resources_per_worker={"CPU": 0.5}),
        run_config=RunConfig(name=name, storage_path=str(tmp_path),
                             worker_runtime_env={"env_vars": env} if env else None),
    )


class Fit:
    """trainer.fit() in a thread: the test drives the debugger meanwhile."""

    def __init__(self, trainer: Any) -> None:
        self.out = Path(trainer.train_loop_config["out"])
        self.result: Any = None
        self.error: BaseException | None = None
        self.thread = threading.Thread(target=self._run, args=(trainer,), daemon=True)
        self.thread.start()

    def _run(self, trainer: Any) -> None:
        try:
            self.result = trainer.fit()
        except BaseException as exc:  # the test reports it
            self.error = exc

    def join(self, timeout: float = 240) -> list[float]:
        """Every rank's result, in rank order, once the run finished without error."""
        self.thread.join(timeout)
        assert not self.thread.is_alive(), "the run did not finish"
        assert self.error is None, f"the run failed: {self.error!r}"
        assert self.result is not None and self.result.error is None, self.result.error
        files = sorted(self.out.iterdir(), key=lambda p: int(p.name[4:]))
        return [float(p.read_text()) for p in files]


def _list_json(c: Cluster) -> list[dict[str, Any]]:
    out = c.cli("list", "--json", timeout=90)
    assert out.returncode == 0, out.stderr
    return list(json.loads(out.stdout))


def _wait_held_in_collective(c: Cluster, sid: str, ranks: list[int], timeout: float = 120) -> list[dict[str, Any]]:
    """`raydbg list --json` until the paused session holds `ranks`, all inside a collective."""
    deadline = time.monotonic() + timeout
    last: Any = None
    while time.monotonic() < deadline:
        recs = {r["id"]: r for r in _list_json(c)}
        last = recs.get(sid)
        held = (last or {}).get("held") or []
        if sorted(h["world_rank"] for h in held) == ranks and all(h["in_collective"] for h in held):
            return list(held)
        time.sleep(0.5)
    raise AssertionError(f"ranks {ranks} not shown held in a collective: {last}")


def test_paused_rank_outlives_a_short_collective_timeout(cluster: tuple[Cluster, Any], tmp_path: Path) -> None:
    c, gw = cluster
    fit = Fit(_trainer(targets.rank0_pauses, "gang-timeout", tmp_path))
    rec = wait_for_session(gw, timeout=180, function="rank0_pauses", line=targets.line_of("gang_rank0"),
                           train_run="gang-timeout")
    assert (rec["train_run"], rec["train_rank"], rec["train_local_rank"], rec["train_world_size"]) == (
        "gang-timeout", 0, 0, 2)
    assert rec["group"] is None
    held = _wait_held_in_collective(c, rec["id"], [1])
    assert held[0]["state"] == "held" and "all_reduce" in held[0]["summary"]
    text = c.cli("list", timeout=90)
    assert text.returncode == 0 and "held by rank 0 of run gang-timeout: ranks 1:" in text.stdout, text.stdout
    # Rank 1 has been in all_reduce since before the line above: stay paused 2x its timeout.
    time.sleep(2 * COLLECTIVE_TIMEOUT_S + 0.5)
    with forward(c.address, rec["id"]) as port:
        seen = asyncio.run(attach_and_inspect(port, "local_value"))  # then `continue` over DAP
    assert seen["value"] == "1000"
    assert fit.join() == [3.0, 3.0]  # 1 + 2: rank 1's all_reduce survived the pause
    wait_gone(gw, rec["id"])


def test_without_the_raised_timeout_the_same_pause_kills_the_run(cluster: tuple[Cluster, Any],
                                                                   tmp_path: Path) -> None:
    """The control of the test above: with RAYDBG_TRAIN_PG_TIMEOUT_S=0 gloo enforces the 3 s timeout."""
    _, gw = cluster
    fit = Fit(_trainer(targets.rank0_pauses, "gang-timeout-kept", tmp_path,
                       env={"RAYDBG_TRAIN_PG_TIMEOUT_S": "0"}))
    rec = wait_for_session(gw, timeout=180, function="rank0_pauses", train_run="gang-timeout-kept")
    # Rank 0 is never continued: the run ends as soon as rank 1's all_reduce times out.
    fit.thread.join(120)
    assert not fit.thread.is_alive(), "the run outlived its 3 s collective timeout"
    error = fit.error if fit.error is not None else getattr(fit.result, "error", None)
    assert error is not None, "the run finished although rank 0 never left its breakpoint"
    assert TIMED_OUT in str(error), str(error)[:3000]
    wait_gone(gw, rec["id"], timeout=60)  # rank 0's worker went with the run


def test_pause_all_lists_one_group_and_continues_as_one(cluster: tuple[Cluster, Any], tmp_path: Path,
                                                        history_dir: Path) -> None:
    c, gw = cluster
    # RAYDBG_TRAIN_PAUSE=all in the run's workers (raydbg.breakpoint(all_ranks=True) is unit tested).
    fit = Fit(_trainer(targets.all_ranks_pause, "gang-all", tmp_path, workers=3, env={"RAYDBG_TRAIN_PAUSE": "all"}))
    deadline = time.monotonic() + 180
    members: list[dict[str, Any]] = []
    while time.monotonic() < deadline:
        members = [r for r in asyncio.run(gw.sessions()) if r.get("train_run") == "gang-all" and r["attachable"]]
        if len(members) == 3:
            break
        time.sleep(0.2)
    assert len(members) == 3, members
    groups = {r["group"] for r in members}
    assert len(groups) == 1 and None not in groups
    group = groups.pop()
    assert sorted(r["train_rank"] for r in members) == [0, 1, 2]
    assert all(r["line"] == targets.line_of("gang_all") for r in members)
    text = c.cli("list", timeout=90)
    assert text.returncode == 0 and f"group {group}: ranks 0-2 (3/3) of run gang-all" in text.stdout, text.stdout
    # A client attaches to one of them (rank 1) and stays; `raydbg continue GROUP` resumes all three.
    rank1 = next(r for r in members if r["train_rank"] == 1)

    async def attached_then_continue() -> str:
        with forward(c.address, rank1["id"]) as port:
            seen = await attach_and_inspect(port, "local_value", resume=False)
            client = seen["client"]
            assert seen["value"] == "2001"
            out = await asyncio.to_thread(c.cli, "continue", group, timeout=60)
            assert out.returncode == 0, out.stderr
            assert "3 session(s) resume" in out.stdout
            await asyncio.to_thread(fit.thread.join, 180)
            await client.disconnect()
            await client.close()
            return str(seen["value"])

    asyncio.run(attached_then_continue())
    assert fit.join() == [6.0, 6.0, 6.0]
    for r in members:
        wait_gone(gw, r["id"])
    # The job's record: each rank's pause (who, where, why) and its end; never a frame's values.
    from raydbg.history import lifecycle

    ids = {r["id"] for r in members}

    def lifecycles(v: dict[str, Any]) -> list[tuple[str, str]]:
        return sorted((e["details"].get("session"), e["kind"]) for e in v["events"]
                      if e["kind"].startswith("session.") and e["details"].get("session") in ids)

    kept = shown_until(members[0]["job_id"], history_dir,
                       lambda v: {k for _, k in lifecycles(v)} >= {"session.paused", "session.continued"}
                       and len(lifecycles(v)) >= 6)
    for sid in ids:
        assert {k for s, k in lifecycles(kept) if s == sid} >= {"session.paused", "session.continued"}
    paused = [e for e in kept["events"] if e["kind"] == "session.paused" and e["details"].get("session") in ids]
    assert {e["details"]["train_rank"] for e in paused} == {0, 1, 2}
    assert all(e["details"]["line"] == targets.line_of("gang_all") and e["details"]["group"] == group for e in paused)
    allowed = set(lifecycle.KEPT) | {"session", "exception", "paused_s"}
    assert all(set(e["details"]) <= allowed for e in kept["events"] if e["kind"].startswith("session.p"))


def _hang_events(gw: Any, run: str) -> list[dict[str, Any]]:
    return [e for e in asyncio.run(gw.events(500))
            if e.get("kind") == "hang" and (e.get("details") or {}).get("train_run") == run]


def _wait_events(fetch: Callable[[], list[dict[str, Any]]], timeout: float = 180) -> list[dict[str, Any]]:
    deadline = time.monotonic() + timeout
    while not fetch() and time.monotonic() < deadline:
        time.sleep(0.5)
    return fetch()


def _job_hang_events(gw: Any, job: str) -> list[dict[str, Any]]:
    """Hang events of a job's `raydbg.progress()` beats (not of a Train run)."""
    return [e for e in asyncio.run(gw.events(500)) if e.get("kind") == "hang"
            and (e.get("details") or {}).get("job_id") == job and not e["details"].get("train_run")]


def test_hang_event_fires_once_for_a_stuck_run(cluster: tuple[Cluster, Any], tmp_path: Path, history_dir: Path) -> None:
    import ray

    c, gw = cluster
    release = tmp_path / "release"
    # Alongside, in the same job, a plain task that beats once with raydbg.progress() and sticks.
    job = ray.get_runtime_context().get_job_id()
    task = ray.remote(max_calls=1, num_cpus=0.25)(targets.stuck_job_task).remote(str(release))
    stuck = Fit(_trainer(targets.stuck_rank, "gang-stuck", tmp_path, workers=4,
                         config={"release": str(release), "stuck": 2}))
    events = _wait_events(lambda: _hang_events(gw, "gang-stuck"))
    assert len(events) == 1, events
    details = events[0]["details"]
    assert details["world_size"] == 4 and details["stalled_for_s"] >= HANG_AFTER_S
    assert sorted(r["world_rank"] for r in details["ranks"]) == [0, 1, 2, 3]
    classes = details["classes"]
    by_rank = {m["world_rank"]: cl for cl in classes for m in cl["members"]}
    assert not by_rank[2]["in_collective"] and "stuck_rank" in by_rank[2]["summary"], classes
    assert by_rank[0]["in_collective"] and by_rank[0]["id"] != by_rank[2]["id"], classes
    # The wait-for graph (Flight Recorder): ranks 0, 1, 3 wait in the world's all_reduce for
    # rank 2, which has not reached it; rank 2 is named, with where it is.
    (hop,) = details["waits"]
    assert (hop["ranks"], hop["on"], hop["kind"], hop["op"], hop["group_label"]) == (
        [0, 1, 3], [2], "collective", "all_reduce", "world"), hop
    assert [(c["world_rank"], "stuck_rank" in c["stack_class"]["summary"]) for c in details["culprits"]] == [(2, True)]
    where = details["culprits"][0]["stack_class"]["summary"]
    assert details["chain"] == [f"ranks 0,1,3 wait in all_reduce #{hop['seq']} (world) for 2", f"rank 2 is in {where}"]
    assert f"; ranks 0,1,3 wait in all_reduce #{hop['seq']} (world) for 2; rank 2 is in {where}" in events[0]["message"]
    # The gang report says the same, per rank: the last collective each started.
    report = json.loads(c.cli("stacks", "--run", "gang-stuck", "--json", timeout=90).stdout)
    (run,) = report["runs"]
    assert run["culprits"] == [2] and run["collectives_seen"] == [0, 1, 2, 3], run
    # (a rank that has started no collective yet has no entry: 0; "0" is torch's name of the world group)
    started = {r["world_rank"]: (r["collectives"].get("0") or {"started": {"seq": 0}})["started"]["seq"]
               for r in run["ranks"]}
    assert started[2] == hop["seq"] - 1 and {started[r] for r in (0, 1, 3)} == {hop["seq"]}, started
    text = c.cli("stacks", "--run", "gang-stuck", timeout=90).stdout
    assert f"\n    ranks 0,1,3 wait in all_reduce #{hop['seq']} (world) for 2\n" in text, text
    jobs = _wait_events(lambda: _job_hang_events(gw, job), timeout=60)  # the task's, as a job's
    assert len(jobs) == 1, jobs
    assert [(r["world_rank"], r["step"]) for r in jobs[0]["details"]["ranks"]] == [(None, 1)]
    assert jobs[0]["details"]["stalled_for_s"] >= HANG_AFTER_S
    assert any("stuck_job_task" in cl["summary"] for cl in jobs[0]["details"]["classes"]), jobs
    shown = c.cli("events", "--limit", "500", timeout=60)
    assert shown.returncode == 0 and "Train run gang-stuck" in shown.stdout, shown.stdout
    assert f"job {job} made no progress" in shown.stdout, shown.stdout
    # The job's record (raydbg history, read with no cluster): the same event, its chain and classes.
    kept = shown_until(job, history_dir, lambda v: any(e["id"] == events[0]["id"] for e in v["events"]))
    (hang_kept,) = [e for e in kept["events"] if e["id"] == events[0]["id"]]
    assert hang_kept["details"]["chain"] == details["chain"] and hang_kept["details"]["classes"] == classes
    text = history("show", job, str(history_dir)).stdout
    assert f"\n        ranks 0,1,3 wait in all_reduce #{hop['seq']} (world) for 2\n" in text, text
    assert "culprit rank 2" in text and events[0]["message"] in text, text
    # A second event would come at the next check (each 1 s), or a threshold after the first.
    time.sleep(2 * HANG_AFTER_S)
    assert len(_hang_events(gw, "gang-stuck")) == 1  # once per stall; the job is not stopped
    assert len(_job_hang_events(gw, job)) == 1
    release.touch()
    assert stuck.join() == [10.0] * 4
    assert ray.get(task, timeout=60) > 0
    assert len(_hang_events(gw, "gang-stuck")) == 1


def test_no_hang_event_for_a_slow_but_progressing_run(cluster: tuple[Cluster, Any], tmp_path: Path) -> None:
    _, gw = cluster
    # A step (and its report) every 2 s, against a 6 s threshold, for 12 s in all.
    slow = Fit(_trainer(targets.slow_steps, "gang-slow", tmp_path, config={"steps": 6, "step_s": 2.0}))
    assert slow.join() == [6 * 3.0] * 2
    assert _hang_events(gw, "gang-slow") == []


def test_no_hang_event_for_a_run_paused_by_raydbg(cluster: tuple[Cluster, Any], tmp_path: Path) -> None:
    c, gw = cluster
    paused = Fit(_trainer(targets.rank0_pauses, "gang-paused", tmp_path))
    rec = wait_for_session(gw, timeout=180, function="rank0_pauses", train_run="gang-paused")
    time.sleep(2 * HANG_AFTER_S)  # paused well past the threshold (checked each 1 s)
    out = c.cli("continue", rec["id"], timeout=60)  # no client attached: the waiting session ends
    assert out.returncode == 0 and f"session {rec['id']} resumes" in out.stdout, out.stdout + out.stderr
    assert paused.join() == [3.0, 3.0]
    wait_gone(gw, rec["id"])
    time.sleep(2 * HANG_AFTER_S)  # the pause does not count after the fact either
    assert _hang_events(gw, "gang-paused") == []


def _straggler_events(gw: Any, run: str) -> list[dict[str, Any]]:
    return [e for e in asyncio.run(gw.events(500))
            if e.get("kind") == "straggler" and (e.get("details") or {}).get("train_run") == run]


def test_one_straggler_event_for_a_rank_slower_every_step_none_for_a_uniform_slowdown(
        cluster: tuple[Cluster, Any], tmp_path: Path, history_dir: Path) -> None:
    c, gw = cluster
    steps, release = 20, tmp_path / "release-stragglers"  # the event is due at step 6: room to sample
    slow = Fit(_trainer(targets.straggler_steps, "gang-straggler", tmp_path, workers=3,
                        config={"steps": steps, "step_s": 0.1, "extra_s": 0.3, "slow_rank": 0,
                                "release": str(release)}))
    uniform = Fit(_trainer(targets.straggler_steps, "gang-uniform", tmp_path, workers=3,
                           config={"steps": steps, "step_s": 0.4, "extra_s": 0.0, "release": str(release)}))
    try:
        events = _wait_events(lambda: _straggler_events(gw, "gang-straggler"), timeout=240)
        assert len(events) == 1, events
        details = events[0]["details"]
        assert details["world_rank"] == 0 and details["pid"] and events[0]["node_id"]  # the rank's node
        assert min(details["busy_s"]) >= 0.4 and max(details["others_median_s"]) < min(details["busy_s"])
        assert "rank 0 worked" in events[0]["message"]
        # Its stack class, taken then: rank 0 alone, in its loop.
        klass = details["stack_class"]
        assert klass is not None and klass["count"] == 1, details
        assert any(f.get("function") == "straggler_steps" for f in klass["frames"]), klass["summary"]
        # `raydbg steps`: every rank's recent step times, the straggler marked.
        out = c.cli("steps", "--run", "gang-straggler", "--json", timeout=60)
        assert out.returncode == 0, out.stderr
        (run,) = json.loads(out.stdout)["runs"]
        assert [(r["world_rank"], r["straggler"]) for r in run["ranks"]] == [(0, True), (1, False), (2, False)]
        assert run["ranks"][0]["busy_median_s"] > 3 * run["ranks"][1]["busy_median_s"]
        text = c.cli("steps", "--run", "gang-straggler", timeout=60).stdout
        assert "straggler(s): rank 0" in text, text
        _wait_events(lambda: [1] if all(r.get("step") == steps for r in _steps(c, "gang-uniform")) else [], 120)
        time.sleep(2.0)  # two more checks with every uniform step recorded
    finally:
        release.touch()
    assert slow.join() == [float(steps)] * 3
    assert uniform.join() == [float(steps)] * 3
    assert len(_straggler_events(gw, "gang-straggler")) == 1
    assert _straggler_events(gw, "gang-uniform") == []
    # The job's record: the straggler event, and its step times per rank (rank 0 the slowest).
    def straggler_kept(v: dict[str, Any]) -> bool:
        return (any(e["id"] == events[0]["id"] for e in v["events"])
                and len(v["steps"].get("gang-straggler") or {}) == 3)

    kept = shown_until("gang-straggler", history_dir, straggler_kept)
    medians = {int(r): sorted(p[2] for p in pts)[len(pts) // 2] for r, pts in kept["steps"]["gang-straggler"].items()}
    assert max(medians, key=lambda r: medians[r]) == 0 and medians[0] > 2 * medians[1], medians
    assert "<- slowest" in history("show", "gang-straggler", str(history_dir)).stdout
    page = tmp_path / "report.html"
    out = history("report", "gang-straggler", str(history_dir), "--html", str(page))
    assert out.returncode == 0, out.stderr
    assert 'id="timeline"' in page.read_text() and 'class="heatmap"' in page.read_text()


def _steps(c: Cluster, run: str) -> list[dict[str, Any]]:
    out = c.cli("steps", "--run", run, "--json", timeout=60)
    runs = json.loads(out.stdout)["runs"] if out.returncode == 0 else []
    return list(runs[0]["ranks"]) if runs else []
