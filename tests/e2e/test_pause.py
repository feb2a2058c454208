"""`raydbg pause TARGET` on a real cluster: a Train rank in a Python loop stops at a line of its loop,
a rank blocked in a gloo all_reduce is listed at once as a snapshot with its locals and becomes a
session once the collective returns; continue lets each run finish with the right result. Also a
stack class and a plain task's pid as targets, and the refusals (another user's process, a process
raydbg does not run in, a bad target, no token). A DDP trainer installed as a package (its files in a
site-packages directory) is the user's code: the stacks name its frames, a pause stops in it."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from cluster import needs_torch

from e2e import installed_trainer
from e2e import pause_targets as targets
from e2e.conftest import (
    Cluster,
    attach_and_inspect,
    forward,
    wait_for_session,
    wait_gone,
    wait_until,
)

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(420)]

PAUSE_WITHIN_S = 2.0  # the bound: a running rank's session is listed within 2 s


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Cluster, Any]]:
    from e2e.gang_targets import TRAIN_CLUSTER_ENV

    site = installed_trainer.install(tmp_path_factory.mktemp("installed-trainer"))
    env = {"RAYDBG_WAIT_TIMEOUT": "300", "RAYDBG_RESUME_POLL_S": "0.25", **TRAIN_CLUSTER_ENV,
           "RAY_TRAIN_ENABLE_PREEMPTION_WATCHER": "1",  # Ray's default here: a run's every helper actor
           "PYTHONPATH": installed_trainer.pythonpath(site)}  # the workers import the installed trainer
    sys.path.insert(0, str(site))  # and so does this driver (the function goes by reference)
    try:
        with Cluster(num_cpus=6, env=env, by_value=(targets, sys.modules[__name__])) as c:
            yield c, c.up()
    finally:
        sys.path.remove(str(site))


class Fit:
    """trainer.fit() in a thread; each rank's result file in `out`."""

    def __init__(self, trainer: Any, out: Path) -> None:
        self.out = out
        self.error: BaseException | None = None
        self.result: Any = None
        self.thread = threading.Thread(target=self._run, args=(trainer,), daemon=True)
        self.thread.start()

    def _run(self, trainer: Any) -> None:
        try:
            self.result = trainer.fit()
        except BaseException as exc:
            self.error = exc

    def join(self, timeout: float = 180) -> dict[str, str]:
        self.thread.join(timeout)
        assert not self.thread.is_alive(), "the run did not finish"
        assert self.error is None and self.result.error is None, self.error or self.result.error
        return {p.name: p.read_text() for p in self.out.iterdir()}


def _fit(fn: Any, name: str, tmp_path: Path, torch_backend: bool = False) -> tuple[Fit, Path]:
    from ray.train import RunConfig, ScalingConfig

    out, release = tmp_path / f"out-{name}", tmp_path / f"release-{name}"
    out.mkdir()
    kwargs: dict[str, Any] = dict(
        train_loop_config={"out": str(out), "release": str(release)},
        scaling_config=ScalingConfig(num_workers=2, use_gpu=False, resources_per_worker={"CPU": 0.5}),
        run_config=RunConfig(name=name, storage_path=str(tmp_path / "storage")),
    )
    if torch_backend:
        from ray.train.torch import TorchConfig, TorchTrainer

        trainer = TorchTrainer(fn, torch_config=TorchConfig(backend="gloo"), **kwargs)
    else:
        from ray.train.v2.api.data_parallel_trainer import DataParallelTrainer

        trainer = DataParallelTrainer(fn, **kwargs)
    return Fit(trainer, out), release


def _ranks_known(gw: Any, run: str, n: int) -> bool:
    """The run's ranks are known to raydbg (what RUN:RANK is looked up in)."""
    workers = asyncio.run(gw.stacks(run=run, pyspy=False)).get("workers") or []
    return len({w.get("world_rank") for w in workers if w.get("world_rank") is not None}) >= n


def _pause(gw: Any, target: str, wait_s: float = 10.0) -> tuple[dict[str, Any], float]:
    start = time.monotonic()
    answer = asyncio.run(gw.pause(target, wait_s=wait_s))
    return answer, time.monotonic() - start


def _pause_to_session(gw: Any, target: str) -> tuple[dict[str, Any], float]:
    """Pause a thread that runs Python: its session, and the seconds from the request until it
    was listed. On a loaded machine the thread may not get the CPU within the worker's grace:
    then it is listed as a snapshot first and becomes the session under the same id."""
    start = time.monotonic()
    answer = asyncio.run(gw.pause(target, wait_s=10))
    rec = answer["session"]
    assert rec is not None, answer
    if rec["state"] == "snapshot":
        where = [(f["function"], Path(f["file"]).name, f["line"]) for f in rec.get("frames") or []]
        rec = wait_until(lambda: next((s for s in asyncio.run(gw.sessions())
                                       if s["id"] == rec["id"] and s["state"] != "snapshot"), None),
                         30, f"snapshot {rec['id']} (thread {rec.get('thread_name')} at {where[:12]}) becoming a session",
                         every=0.02)
    return {**answer, "session": rec}, time.monotonic() - start


def _loop_lines() -> set[int]:
    head = targets.line_of("loop_head")
    return set(range(head, head + 4))


def test_pause_a_rank_in_a_python_loop_then_continue(cluster: tuple[Cluster, Any], tmp_path: Path) -> None:
    """No torch (the generic backend): runs on every entry of the version matrix."""
    c, gw = cluster
    run = "pause-loop"
    fit, release = _fit(targets.loop_until_released, run, tmp_path)
    try:
        # This loop never reports: its ranks are known from Train's state, not progress records.
        wait_until(lambda: _ranks_known(gw, run, 2), 120, "both ranks in the stacks report", every=0.5)
        answer, took = _pause_to_session(gw, f"{run}:1")
        rec = answer["session"]
        assert took < PAUSE_WITHIN_S, f"the session was listed {took:.2f}s after the request"
        assert rec["reason"] == "pause"
        assert rec["train_rank"] == 1 and rec["train_run"] == run, rec
        assert rec["file"] == targets.FILE and rec["line"] in _loop_lines(), rec
        assert answer["world_rank"] == 1 and answer["pid"] == rec["pid"]
        # Listed for every client, attachable; the other rank runs on.
        rec = wait_for_session(gw, 30, id=rec["id"])
        assert [s["train_rank"] for s in asyncio.run(gw.sessions()) if s.get("train_run") == run] == [1]
        out = c.cli("list")
        assert rec["id"] in out.stdout, out.stdout + out.stderr
        # A debugger attaches to it as to any breakpoint: the loop's locals, then a DAP continue.
        with forward(c.address, rec["id"]) as port:
            seen = asyncio.run(attach_and_inspect(port, "total", "i * (i - 1) // 2 == total"))
        assert seen["top"]["line"] in _loop_lines() and seen["evaluated"] == "True", seen
        wait_gone(gw, rec["id"])
        release.touch()
        assert fit.join() == {"rank0": "True", "rank1": "True"}
    finally:
        release.touch()


def test_pause_by_stack_class_and_by_task_pid(cluster: tuple[Cluster, Any], tmp_path: Path) -> None:
    import json

    import ray

    c, gw = cluster
    release = tmp_path / "release-task"
    ref = ray.remote(targets.counting_task).remote(str(release))
    try:
        def task_class() -> dict[str, Any] | None:
            out = c.cli("stacks", "--json", "--no-pyspy", timeout=60)
            report = json.loads(out.stdout) if out.returncode == 0 else {}
            return next((k for k in report.get("classes") or []
                         if "counting_task" in {f["function"] for f in k.get("frames") or []}), None)

        cls = wait_until(task_class, 60, "the task's stack class", every=0.5)
        pid = int(cls["members"][0]["pid"])
        out = c.cli("pause", cls["id"])  # the class's representative: the task's worker
        assert out.returncode == 0, out.stderr
        assert f"pid {pid}" in out.stdout and "session" in out.stdout, out.stdout
        rec = wait_for_session(gw, 30, pid=pid, reason="pause")
        assert rec["line"] == targets.line_of("task_loop") or rec["line"] == targets.line_of("task_loop") + 1
        asyncio.run(gw.continue_session(rec["id"]))
        wait_gone(gw, rec["id"])

        answer, _ = _pause_to_session(gw, str(pid))  # and by pid
        assert answer["session"]["pid"] == pid, answer
        asyncio.run(gw.continue_session(answer["session"]["id"]))
        wait_gone(gw, answer["session"]["id"])
    finally:
        release.touch()
    assert ray.get(ref, timeout=60) > 0


@needs_torch
def test_a_rank_blocked_in_all_reduce_is_a_snapshot_then_a_session(cluster: tuple[Cluster, Any],
                                                                    tmp_path: Path) -> None:
    c, gw = cluster
    run = "pause-all-reduce"
    fit, release = _fit(targets.blocked_in_all_reduce, run, tmp_path, torch_backend=True)
    try:
        wait_until(lambda: _ranks_known(gw, run, 2), 120, "both ranks in the stacks report", every=0.5)

        def in_all_reduce() -> bool:
            report = asyncio.run(gw.stacks(run=run, pyspy=False))
            rank1 = [w for w in report.get("workers") or [] if w.get("world_rank") == 1]
            return bool(rank1) and any(f.get("line") == targets.line_of("all_reduce")
                                       for t in rank1[0].get("threads") or [] for f in t.get("frames") or [])

        wait_until(in_all_reduce, 60, "rank 1 inside the all_reduce", every=0.5)
        answer, took = _pause(gw, f"{run}:1")
        snap = answer["session"]
        assert snap is not None and snap["state"] == "snapshot", answer
        assert took < PAUSE_WITHIN_S, f"the snapshot was listed {took:.2f}s after the request"
        assert snap["attachable"] is False
        user = next(f for f in snap["frames"] if f["file"] == targets.FILE)
        assert user["line"] == targets.line_of("all_reduce")
        assert user["locals"]["step"] == "3" and user["locals"]["rank"] == "1"
        assert user["locals"]["grads"].startswith("<torch.Tensor shape=(4, 2) dtype=torch.float32"), user
        # The CLI prints the frames with their locals.
        out = c.cli("list")
        assert snap["id"] in out.stdout, out.stdout

        release.touch()  # rank 0 joins: the collective returns, rank 1 stops at the next line
        rec = wait_for_session(gw, 60, id=snap["id"])
        assert rec["state"] in ("waiting", "attached") and rec["line"] == targets.line_of("after_all_reduce"), rec
        asyncio.run(gw.continue_session(rec["id"]))
        wait_gone(gw, rec["id"])
        results = fit.join()
        assert results == {"rank0": "24.0", "rank1": "24.0"}  # (1 + 2) in each of 8 elements, summed
    finally:
        release.touch()


def _pause_when_it_trains(gw: Any, target: str, within: float) -> dict[str, Any]:
    """Pause `target` as soon as its training thread runs (before that, the worker answers that it
    has nothing to pause: Train has not started the thread yet); its session (snapshot first)."""
    from raydbg.client import GatewayError

    def ask() -> dict[str, Any] | None:
        try:
            return _pause_to_session(gw, target)[0]
        except GatewayError as exc:
            if "nothing to pause" in str(exc):
                return None
            raise

    return dict(wait_until(ask, within, f"{target}'s training thread paused", every=0.05))


@needs_torch
def test_an_installed_ddp_trainer_is_the_users_code_in_stacks_and_pause(cluster: tuple[Cluster, Any],
                                                                        tmp_path: Path) -> None:
    """Issue 39: a trainer installed as a package (prepare_model's DDP, a DataLoader over a
    DistributedSampler, a checkpoint per epoch): the stacks name its frames, not `wait
    threading.py:327 (library)`; `raydbg pause RUN:1`, early in the run and while it trains,
    stops at a line of its installed file, never in generated code (`<string>`)."""
    import ddp_trainer.loop as trainer

    c, gw = cluster
    assert f"{os.sep}site-packages{os.sep}ddp_trainer{os.sep}" in str(trainer.__file__), trainer.__file__
    lines = len(Path(str(trainer.__file__)).read_text().splitlines())
    run = "installed-ddp"
    fit, release = _fit(trainer.train_func, run, tmp_path, torch_backend=True)
    try:
        wait_until(lambda: _ranks_known(gw, run, 2), 120, "both ranks in the stacks report", every=0.2)
        # Early: the first moment rank 1's training thread runs (building its samples, its model).
        rec = _pause_when_it_trains(gw, f"{run}:1", 60)["session"]
        assert rec["file"] == trainer.__file__ and 1 <= rec["line"] <= lines, rec
        asyncio.run(gw.continue_session(rec["id"]))
        wait_gone(gw, rec["id"])

        def summaries() -> list[str] | None:
            report = asyncio.run(gw.stacks(run=run, pyspy=False))
            ranks = [cls for cls in report.get("classes") or [] if cls["members"][0].get("world_rank") is not None]
            texts = [cls["summary"] for cls in ranks]
            return texts if sum(cls["count"] for cls in ranks) == 2 and all("loop.py:" in t for t in texts) else None

        texts = wait_until(summaries, 60, "the run's stack classes named by the trainer's frames", every=0.5)
        assert not any("(library)" in t for t in texts), texts
        out = c.cli("stacks", "--run", run, "--no-pyspy")
        assert out.returncode == 0 and "loop.py:" in out.stdout, out.stdout + out.stderr

        # While it trains: a session at a line of the installed file; attach, look, continue.
        answer, _ = _pause_to_session(gw, f"{run}:1")
        rec = answer["session"]
        assert rec["file"] == trainer.__file__ and rec["train_rank"] == 1, rec
        with forward(c.address, rec["id"]) as port:
            seen = asyncio.run(attach_and_inspect(port, "config", "__name__"))
        assert seen["top"]["source"]["path"] == trainer.__file__ and seen["evaluated"] == "'ddp_trainer.loop'", seen
        wait_gone(gw, rec["id"])
        release.touch()
        results = fit.join()
        assert set(results) == {"rank0", "rank1"} and results["rank0"] == results["rank1"], results
    finally:
        release.touch()


def test_refusals_say_why_in_one_line(cluster: tuple[Cluster, Any]) -> None:
    from raydbg.client import GatewayError

    c, gw = cluster
    if os.getuid() != 0:
        pytest.skip("another user's process needs root to start (these machines run the suite as root)")
    other = subprocess.Popen(["sleep", "60"], user="nobody")
    mine = subprocess.Popen(["sleep", "60"])
    try:
        with pytest.raises(GatewayError, match="runs as nobody: raydbg pauses only its own user's workers"):
            asyncio.run(gw.post("/api/v1/node/pause", body={"pid": other.pid}))
        with pytest.raises(GatewayError, match="not a raydbg-activated worker"):
            asyncio.run(gw.post("/api/v1/node/pause", body={"pid": mine.pid}))
        out = c.cli("pause", str(mine.pid))
        assert out.returncode != 0 and "no raydbg-activated worker with pid" in out.stderr, out.stderr
        assert len(out.stderr.strip().splitlines()) == 1, out.stderr
        out = c.cli("pause", "not a target")
        assert out.returncode != 0 and "cannot read 'not a target' as a target" in out.stderr, out.stderr
        out = c.cli("pause", "no-such-run:3")
        assert out.returncode != 0 and "no rank 3 of a Train run named no-such-run" in out.stderr, out.stderr
    finally:
        for p in (other, mine):
            p.kill()
            p.wait()
    # Without the token: refused before anything is looked at.
    import aiohttp

    async def no_token() -> int:
        async with aiohttp.ClientSession() as http:
            async with http.post(gw.url("/api/v1/pause"), json={"target": "x:1"}) as resp:
                return resp.status

    assert asyncio.run(no_token()) == 401
