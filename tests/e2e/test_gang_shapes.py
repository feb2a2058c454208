"""Real training shapes on a real cluster (Ray Train, gloo, CPU), one rank stuck in each (DDP,
tensor-parallel subgroups, HSDP, a send/recv pipeline, FSDP2 on the SD tiny UNet): the wait-for
graph names that rank alone, with the chain of who waits for whom, in `raydbg stacks` (JSON
and text) and in the hang event, and `raydbg pause RUN:RANK` stops that rank in its loader;
two groups entered in opposite orders are named a deadlock.

One cluster for the module; each shape is its own TorchTrainer run (tests/e2e/shape_targets.py),
all started at once by the module's `runs` (their start-ups overlap: most of a run's time);
each test checks its run, then releases it. The deadlocked run ends by its collective
timeout, checked last. torch's own analyzer checks the same shapes on raw gloo ranks in
tests/test_gang_wait_for_oracle.py.
"""

from __future__ import annotations

import asyncio
import json
import re
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from cluster import needs_torch

from e2e import gang_targets, shape_targets
from e2e.conftest import Cluster
from e2e.test_gang_train import Fit

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(900), needs_torch]

HANG_AFTER_S = 20.0  # long enough for every rank to reach its wait on a loaded machine
# gloo's collective timeout of the deadlocked run (how it ends): its graph is checked first,
# within this time of the ranks' entering their collectives, while the other runs start.
DEADLOCK_TIMEOUT_S = 60
# Each shape: its loop, ranks, the stuck rank (None: the deadlock, where no rank is free).
SHAPES: dict[str, tuple[Any, int, int | None]] = {
    "shape-deadlock": (shape_targets.opposite_orders, 3, None),
    "shape-ddp": (shape_targets.ddp, 3, 2),
    "shape-tp": (shape_targets.tensor_parallel, 4, 3),
    "shape-hsdp": (shape_targets.hsdp, 4, 3),
    "shape-pp": (shape_targets.pipeline, 4, 2),
    "shape-fsdp2": (shape_targets.fsdp2_sd_tiny, 2, 1),
}
LOADER = f"load_batch shape_targets.py:{shape_targets.load_batch.__code__.co_firstlineno + 4}"


@pytest.fixture(scope="module")
def cluster() -> Iterator[tuple[Cluster, Any]]:
    # 20 ranks on 2 cores: more logical CPUs than cores (FACTS.md).
    env = {"RAYDBG_HANG_AFTER_S": str(HANG_AFTER_S), **gang_targets.TRAIN_CLUSTER_ENV}
    with Cluster(num_cpus=12, env=env, by_value=(shape_targets,)) as c:
        yield c, c.up()


@pytest.fixture(scope="module")
def runs(cluster: tuple[Cluster, Any], tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[dict[str, Fit], Path]]:
    """Every shape's run, started at once; each released on the way out whatever happened (a
    failed check must not leave its ranks stuck)."""
    base = tmp_path_factory.mktemp("shapes")
    fits = {}
    for name, (fn, workers, stuck) in SHAPES.items():
        if stuck is None:  # raydbg's raised timeout off for this run: gloo's ends it
            fits[name] = Fit(_trainer(fn, name, base, workers, stuck, timeout_s=DEADLOCK_TIMEOUT_S,
                                      env={"RAYDBG_TRAIN_PG_TIMEOUT_S": "0"}))
        else:
            fits[name] = Fit(_trainer(fn, name, base, workers, stuck))
    try:
        yield fits, base
    finally:
        for name in SHAPES:
            (base / f"release-{name}").touch()


def _trainer(fn: Any, name: str, tmp_path: Path, workers: int, stuck: int | None,
             timeout_s: int = 1800, env: dict[str, str] | None = None) -> Any:
    from ray.train import RunConfig, ScalingConfig
    from ray.train.torch import TorchConfig, TorchTrainer

    out = tmp_path / f"out-{name}"
    out.mkdir()
    return TorchTrainer(
        fn,
        train_loop_config={"out": str(out), "stuck": -1 if stuck is None else stuck,
                           "release": str(tmp_path / f"release-{name}")},
        torch_config=TorchConfig(backend="gloo", timeout_s=timeout_s),
        scaling_config=ScalingConfig(num_workers=workers, use_gpu=False, resources_per_worker={"CPU": 0.5}),
        run_config=RunConfig(name=name, storage_path=str(tmp_path),
                             worker_runtime_env={"env_vars": env} if env else None),
    )


def _run(c: Cluster, name: str) -> dict[str, Any] | None:
    """The run's RunSummary, each rank with its stack class's summary (`where`)."""
    out = c.cli("stacks", "--run", name, "--json", timeout=120)
    answer = json.loads(out.stdout) if out.returncode == 0 else {}
    runs = answer.get("runs")
    if not runs:
        return None
    summaries = {cl["id"]: cl["summary"] for cl in answer.get("classes") or []}
    for r in runs[0]["ranks"]:
        r["where"] = summaries.get(r.get("class_id"))
    return dict(runs[0])


def _wait_graph(c: Cluster, fit: Fit, name: str, done: Callable[[dict[str, Any]], bool],
                timeout: float = 300) -> dict[str, Any]:
    """`raydbg stacks --run NAME --json` until the run's graph says `done` (the ranks have
    reached their waits: start-up on a loaded machine takes a while)."""
    deadline = time.monotonic() + timeout
    seen: list[Any] = []  # each different answer, for the failure message
    while time.monotonic() < deadline:
        run = _run(c, name)
        if run is not None and len(run["ranks"]) == run["world_size"] and done(run):
            return run
        got = run and {**{k: run.get(k) for k in ("culprits", "deadlocks", "chain", "collectives_seen")},
                       "where": [r["where"] for r in run["ranks"]]}
        if not seen or seen[-1] != got:
            seen.append(got)
        time.sleep(1.0)
    ended = "" if fit.thread.is_alive() else f" (the run ended: {fit.error!r} {getattr(fit.result, 'error', None)!r})"
    raise AssertionError(f"run {name}: graph not as expected{ended}; seen: {json.dumps(seen)}")


def _matches(chain: list[str], patterns: list[str]) -> bool:
    return len(chain) == len(patterns) and all(re.fullmatch(p, line) for p, line in zip(patterns, chain, strict=True))


def _release(base: Path, name: str, fit: Fit) -> list[float]:
    (base / f"release-{name}").touch()
    return fit.join(timeout=300)


def _pause_stuck_rank(gw: Any, run: str, rank: int) -> None:
    """`raydbg pause RUN:RANK` on the stuck rank: a session at a line of the training code (its
    loader, not a library or generated frame), then continued."""
    answer = asyncio.run(gw.pause(f"{run}:{rank}", wait_s=10))
    rec = answer["session"]
    assert rec is not None, answer
    deadline = time.monotonic() + 60
    while rec["state"] == "snapshot" and time.monotonic() < deadline:  # listed before the thread stopped
        time.sleep(0.1)
        rec = next((x for x in asyncio.run(gw.sessions()) if x["id"] == rec["id"]), rec)
    assert (Path(rec["file"]).name, rec["function"]) == ("shape_targets.py", "load_batch"), rec
    asyncio.run(gw.continue_session(rec["id"]))


def _hang_events(gw: Any, run: str) -> list[dict[str, Any]]:
    return [e for e in asyncio.run(gw.events(500))
            if e.get("kind") == "hang" and (e.get("details") or {}).get("train_run") == run]


def test_two_groups_entered_in_opposite_orders_are_reported_as_a_deadlock(
        cluster: tuple[Cluster, Any], runs: tuple[dict[str, Fit], Path]) -> None:
    """No rank is free: no culprit, the cycle 0 -> 1 -> 0. First: the run's gloo timeout runs."""
    c, _ = cluster
    fits, _ = runs
    chain = [re.escape("rank 0 waits in all_reduce #1 (group [0,1]) for 1"), r"ranks 1,2 wait in all_reduce #\d+ \(world\) for 0",
             re.escape("deadlock: ranks 0 -> 1 -> 0 wait on each other (a cycle: none of them can go on)")]
    run = _wait_graph(c, fits["shape-deadlock"], "shape-deadlock", lambda r: _matches(r["chain"], chain), timeout=240)
    assert run["culprits"] == [] and [d["ranks"] for d in run["deadlocks"]] == [[0, 1]]


def test_ddp_with_prepare_model_names_the_rank_whose_loader_hangs(
        cluster: tuple[Cluster, Any], runs: tuple[dict[str, Fit], Path]) -> None:
    """DDP's gradient all_reduce runs inside backward(): ranks 0 and 1 wait there for rank 2."""
    c, gw = cluster
    fits, base = runs
    chain = [r"ranks 0,1 wait in all_reduce #\d+ \(world\) for 2", re.escape(f"rank 2 is in {LOADER}")]
    run = _wait_graph(c, fits["shape-ddp"], "shape-ddp", lambda r: _matches(r["chain"], chain))
    assert run["culprits"] == [2]
    _pause_stuck_rank(gw, "shape-ddp", 2)
    values = _release(base, "shape-ddp", fits["shape-ddp"])
    assert len(values) == 3 and len(set(values)) == 1  # DDP kept the replicas equal


def test_tensor_parallel_subgroups_name_the_stuck_rank_alone(
        cluster: tuple[Cluster, Any], runs: tuple[dict[str, Fit], Path]) -> None:
    """Rank 3 stuck before its subgroup's all_reduce: rank 2 waits for it there, ranks 0 and 1
    in the world's gradient all_reduce. Before the graph, the report named ranks 2 and 3."""
    c, gw = cluster
    fits, base = runs
    chain = [r"ranks 0,1 wait in all_reduce #\d+ \(world\) for 2,3",
             re.escape("rank 2 waits in all_reduce #1 (group [2,3]) for 3"),
             re.escape(f"rank 3 is in {LOADER}")]
    run = _wait_graph(c, fits["shape-tp"], "shape-tp", lambda r: _matches(r["chain"], chain))
    assert run["culprits"] == [3] and run["deadlocks"] == []
    assert run["collectives_seen"] == [0, 1, 2, 3]
    assert sorted(run["groups"].values()) == ["group [0,1]", "group [2,3]", "world"]
    text = c.cli("stacks", "--run", "shape-tp", timeout=120).stdout
    assert "  waits (Flight Recorder, process groups, send/recv):\n" in text, text
    assert "    rank 2 waits in all_reduce #1 (group [2,3]) for 3\n" in text, text
    # The hang event: the same chain, rank 3 named with its stack class.
    deadline = time.monotonic() + 240
    while not _hang_events(gw, "shape-tp") and time.monotonic() < deadline:
        time.sleep(1.0)
    (event,) = _hang_events(gw, "shape-tp")
    details = event["details"]
    assert [x["world_rank"] for x in details["culprits"]] == [3], details["culprits"]
    assert details["culprits"][0]["stack_class"]["summary"] == LOADER
    assert _matches(details["chain"], chain), details["chain"]
    assert "; rank 2 waits in all_reduce #1 (group [2,3]) for 3; rank 3 is in load_batch" in event["message"]
    _pause_stuck_rank(gw, "shape-tp", 3)
    values = _release(base, "shape-tp", fits["shape-tp"])
    assert len(values) == 4 and len(set(values)) == 1  # the gradients all-reduced over the world


def test_hsdp_on_a_2x2_mesh_names_the_stuck_rank_through_both_mesh_dimensions(
        cluster: tuple[Cluster, Any], runs: tuple[dict[str, Fit], Path]) -> None:
    c, gw = cluster
    fits, base = runs
    chain = [r"rank 0 waits in all_reduce #\d+ \(group mesh_replicate \[0,2\]\) for 2",
             r"rank 1 waits in all_reduce #\d+ \(group mesh_replicate \[1,3\]\) for 3",
             r"rank 2 waits in all_gather #\d+ \(group mesh_shard \[2,3\]\) for 3",
             re.escape(f"rank 3 is in {LOADER}")]
    run = _wait_graph(c, fits["shape-hsdp"], "shape-hsdp", lambda r: _matches(r["chain"], chain))
    assert run["culprits"] == [3]
    _pause_stuck_rank(gw, "shape-hsdp", 3)
    values = _release(base, "shape-hsdp", fits["shape-hsdp"])
    assert len(values) == 4 and len(set(values)) == 1  # every rank ends with the same loss


def test_a_pipeline_stuck_at_stage_2_chains_through_the_stages(
        cluster: tuple[Cluster, Any], runs: tuple[dict[str, Fit], Path]) -> None:
    """gloo records no send/recv: the peers come from the ranks' waiting frames."""
    c, gw = cluster
    fits, base = runs
    chain = ["rank 0 waits in recv (world) for 1", "rank 1 waits in send (world) for 2",
             "rank 3 waits in recv (world) for 2", f"rank 2 is in {LOADER}"]
    run = _wait_graph(c, fits["shape-pp"], "shape-pp", lambda r: r["chain"] == chain)
    assert run["culprits"] == [2]
    assert [(h["kind"], h["ranks"], h["on"]) for h in run["waits"]] == [
        ("p2p", [0], [1]), ("p2p", [1], [2]), ("p2p", [3], [2])]
    _pause_stuck_rank(gw, "shape-pp", 2)
    assert len(_release(base, "shape-pp", fits["shape-pp"])) == 4


def test_fsdp2_on_the_sd_tiny_unet_names_the_stuck_rank(
        cluster: tuple[Cluster, Any], runs: tuple[dict[str, Fit], Path]) -> None:
    c, gw = cluster
    fits, base = runs
    chain = [r"rank 0 waits in all_gather #\d+ \(world\) for 1", re.escape(f"rank 1 is in {LOADER}")]
    run = _wait_graph(c, fits["shape-fsdp2"], "shape-fsdp2", lambda r: _matches(r["chain"], chain))
    assert run["culprits"] == [1]
    _pause_stuck_rank(gw, "shape-fsdp2", 1)
    values = _release(base, "shape-fsdp2", fits["shape-fsdp2"])
    assert len(values) == 2 and values[0] == values[1]


def test_the_deadlocked_run_ends_by_its_collective_timeout(runs: tuple[dict[str, Fit], Path]) -> None:
    """raydbg's raised timeout off for this run: gloo's ends it (last: its time ran meanwhile)."""
    fit = runs[0]["shape-deadlock"]
    fit.thread.join(DEADLOCK_TIMEOUT_S * 4)
    assert not fit.thread.is_alive(), "the deadlocked run outlived its collective timeout"
    assert fit.error is not None or getattr(fit.result, "error", None) is not None
