"""A 2-rank Ray Train run on Train V2's generic backend (no torch): `raydbg stacks --run` names
both ranks and the hang detector fires once for the stuck run. The torch twins of these
(test_gang_stacks.py, test_gang_train.py) need torch, which the version matrix's light
venvs lack (only CUDA builds of several GB for their Pythons): this one runs on every entry."""

from __future__ import annotations

import asyncio
import json
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from e2e import gang_targets
from e2e.conftest import Cluster, wait_until

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(420)]

RUN = "generic-stuck"
HANG_AFTER_S = 6.0


def stuck_after_one_report(config: dict[str, Any]) -> None:
    """Both ranks report once (a progress beat), then stay in this function until released."""
    import ray.train

    ray.train.report({"step": 1})
    release = Path(config["release"])
    while not release.exists():
        time.sleep(0.2)


@pytest.fixture(scope="module")
def cluster() -> Iterator[tuple[Cluster, Any]]:
    import sys

    env = {"RAYDBG_HANG_AFTER_S": str(HANG_AFTER_S), **gang_targets.TRAIN_CLUSTER_ENV}
    with Cluster(num_cpus=4, env=env, by_value=(sys.modules[__name__],)) as c:
        yield c, c.up()


def _hang_events(gw: Any) -> list[dict[str, Any]]:
    return [e for e in asyncio.run(gw.events(500))
            if e.get("kind") == "hang" and (e.get("details") or {}).get("train_run") == RUN]


def test_stacks_and_the_hang_event_of_a_stuck_run_without_torch(cluster: tuple[Cluster, Any],
                                                                tmp_path: Path) -> None:
    from ray.train import RunConfig, ScalingConfig
    from ray.train.v2.api.data_parallel_trainer import DataParallelTrainer

    c, gw = cluster
    release = tmp_path / "release"
    trainer = DataParallelTrainer(
        stuck_after_one_report, train_loop_config={"release": str(release)},
        scaling_config=ScalingConfig(num_workers=2, use_gpu=False, resources_per_worker={"CPU": 0.5}),
        run_config=RunConfig(name=RUN, storage_path=str(tmp_path / "storage")),
    )
    result: dict[str, Any] = {}
    fit = threading.Thread(target=lambda: result.update(out=trainer.fit()), daemon=True)
    fit.start()
    try:
        def in_the_loop(w: dict[str, Any]) -> bool:
            return "stuck_after_one_report" in {f["function"] for t in w["threads"] for f in t["frames"]}

        def both_ranks() -> dict[str, Any] | None:
            # A rank is listed from its Train setup on (its snapshot names its run and rank),
            # a moment before its training function starts: wait for both in the function.
            out = c.cli("stacks", "--json", "--run", RUN, timeout=120)
            answer = json.loads(out.stdout) if out.returncode == 0 else {}
            workers = answer.get("workers") or []
            ranks = sorted(w.get("world_rank") for w in workers)
            return answer if ranks == [0, 1] and all(in_the_loop(w) for w in workers) else None

        answer = wait_until(both_ranks, 180, "both ranks in the training function in `raydbg stacks --run`",
                            every=1.0)
        (run,) = answer["runs"]
        assert run["run"] == RUN and run["world_size"] == 2
        for w in answer["workers"]:
            assert w["train_run"] == RUN and w["paused"] is False
        events = wait_until(lambda: _hang_events(gw), 180, "a hang event for the run", every=1.0)
        assert len(events) == 1, events
        details = events[0]["details"]
        assert details["world_size"] == 2 and details["stalled_for_s"] >= HANG_AFTER_S
        assert sorted(r["world_rank"] for r in details["ranks"]) == [0, 1]
    finally:
        release.touch()
        fit.join(180)
    assert "out" in result and result["out"].error is None
    assert len(_hang_events(gw)) == 1  # once per stall


def data_then_work(config: dict[str, Any]) -> None:
    """Each step: rank 0 waits 0.3 s for "data" (raydbg.data_wait), every rank works 0.1 s, then reports."""
    import ray.train

    import raydbg

    rank = ray.train.get_context().get_world_rank()
    for step in range(config["steps"]):
        with raydbg.data_wait():
            time.sleep(0.3 if rank == 0 else 0.0)
        time.sleep(0.1)
        ray.train.report({"step": step})


def test_a_straggler_waiting_for_data_is_named_with_where_its_time_goes(cluster: tuple[Cluster, Any],
                                                                         tmp_path: Path) -> None:
    from ray.train import RunConfig, ScalingConfig
    from ray.train.v2.api.data_parallel_trainer import DataParallelTrainer

    _, gw = cluster
    run = "generic-data-wait"
    trainer = DataParallelTrainer(
        data_then_work, train_loop_config={"steps": 12},
        scaling_config=ScalingConfig(num_workers=3, use_gpu=False, resources_per_worker={"CPU": 0.5}),
        run_config=RunConfig(name=run, storage_path=str(tmp_path / "storage")),
    )
    trainer.fit()

    def straggler() -> list[dict[str, Any]]:
        return [e for e in asyncio.run(gw.events(500))
                if e.get("kind") == "straggler" and (e.get("details") or {}).get("train_run") == run]

    (event,) = wait_until(straggler, 30, "a straggler event for the run", every=0.5)
    details = event["details"]
    assert details["world_rank"] == 0
    assert details["data"]["data_wait_s"] >= 0.25 and details["data"]["others_data_wait_s"] < 0.05, details
    assert "the extra time goes waiting for data" in event["message"]


def ray_data_waits() -> list[float]:
    """In an activated worker: iterate a Ray Data dataset whose batches take 0.2 s to make, one
    progress beat per batch; this worker's recorded data waits."""
    import json as json_
    import os

    import ray

    import raydbg
    from raydbg import progress_records

    def slow(batch: dict[str, Any]) -> dict[str, Any]:
        time.sleep(0.2)
        return batch

    raydbg.progress()
    for _ in ray.data.range(8, override_num_blocks=4).map_batches(slow, batch_size=2).iter_batches(
            batch_size=2, prefetch_batches=0):
        raydbg.progress()
    record = json_.loads((progress_records.progress_dir() / str(os.getpid())).read_bytes())
    progress_records.done()
    return [float(t) for t in record["data_s"]]


def test_ray_datas_batch_iterators_count_as_waits_for_data(cluster: tuple[Cluster, Any]) -> None:
    import ray

    waits = ray.get(ray.remote(ray_data_waits).remote(), timeout=180)
    assert len(waits) >= 3 and sum(waits) > 0.3, waits  # the batches' making, waited for in next()
