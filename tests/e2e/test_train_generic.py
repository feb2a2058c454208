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
        def both_ranks() -> dict[str, Any] | None:
            out = c.cli("stacks", "--json", "--run", RUN, timeout=120)
            answer = json.loads(out.stdout) if out.returncode == 0 else {}
            workers = answer.get("workers") or []
            return answer if sorted(w.get("world_rank") for w in workers) == [0, 1] else None

        answer = wait_until(both_ranks, 180, "both ranks in `raydbg stacks --run`", every=1.0)
        (run,) = answer["runs"]
        assert run["run"] == RUN and run["world_size"] == 2
        for w in answer["workers"]:
            assert w["train_run"] == RUN and w["paused"] is False
            assert "stuck_after_one_report" in {f["function"] for t in w["threads"] for f in t["frames"]}
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
