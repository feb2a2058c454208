"""Progress beats from two nodes (a second raylet on this machine) merged by the gateway."""

from __future__ import annotations

import asyncio
import sys
import time
from typing import Any

import pytest
import ray

from e2e.conftest import Cluster

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(600)]


class Beater:
    """Stays alive (its progress record lives as long as its process)."""

    def beat(self, step: int) -> dict[str, Any]:
        import os

        import raydbg

        raydbg.progress(step)
        return {"pid": os.getpid(), "node_id": ray.get_runtime_context().get_node_id()}


def test_progress_of_both_nodes_is_merged() -> None:
    with Cluster(num_cpus=2, by_value=(sys.modules[__name__],)) as c:
        far = c.add_node(num_cpus=2, resources={"far": 1})
        gw = c.up()
        from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

        head = NodeAffinitySchedulingStrategy(c.head_node_id(), soft=False)
        here = ray.remote(Beater).options(scheduling_strategy=head).remote()
        there = ray.remote(Beater).options(resources={"far": 1}).remote()
        mine = ray.get(here.beat.remote(3), timeout=120)
        theirs = ray.get(there.beat.remote(7), timeout=120)
        assert theirs["node_id"] == far.node_id != mine["node_id"]
        deadline = time.monotonic() + 60
        got: dict[str, Any] = {}
        while time.monotonic() < deadline:
            got = asyncio.run(gw.get("/api/v1/progress"))
            pids = {(r["pid"], r["node_id"], r["step"]) for r in got["progress"]}
            if {(mine["pid"], mine["node_id"], 3), (theirs["pid"], theirs["node_id"], 7)} <= pids:
                break
            time.sleep(0.5)
        else:
            raise AssertionError(f"beats of both nodes not merged: {got}")
        assert got["errors"] == []
        job = ray.get_runtime_context().get_job_id()
        assert all(r["job_id"] == job and r["train_run"] is None for r in got["progress"]
                   if r["pid"] in (mine["pid"], theirs["pid"]))
