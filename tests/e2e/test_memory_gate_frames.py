"""Real: the start gate runs at every task start, yet leaves no raydbg frame in the task's stack (paused, or in a traceback)."""

from __future__ import annotations

import asyncio
import os
import sys
import time
import traceback
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import ray
from cluster import ENV, Cluster

from e2e.conftest import forward, wait_for_session

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(300)]

OURS = str(Path(__file__).resolve().parents[2] / "raydbg") + os.sep  # raydbg's own files


@pytest.fixture(scope="module")
def cluster() -> Iterator[tuple[Cluster, Any]]:
    with Cluster(num_cpus=2, env=dict(ENV), by_value=(sys.modules[__name__],)) as c:
        yield c, c.up()


@ray.remote(max_retries=2)
def where() -> tuple[list[str], dict[str, Any], str]:
    from raydbg.memory import node_files

    rec = node_files.read_running([os.getpid()]).get(os.getpid(), {})
    stack = [f.filename for f in traceback.extract_stack()]
    return stack, rec, str(ray.get_runtime_context().get_task_id())


@ray.remote(max_retries=0)
def fails() -> None:
    raise ValueError("boom from the task")


@ray.remote
class Probe:
    def gated(self) -> bool:
        return bool(getattr(ray._private.worker.global_worker.record_task_log_start, "_raydbg", False))


@ray.remote
def paused_here() -> int:
    x = 41
    breakpoint()
    return x + 1


def test_the_gate_ran_but_left_no_frame_in_the_stack_or_the_traceback(
    cluster: tuple[Cluster, Any],
) -> None:
    stack, rec, tid = ray.get(where.remote(), timeout=120)
    # The gate ran for this very task: its record names it and its function (budgets.py).
    assert rec["task_id"] == tid and rec["fn"] and rec["name"] == "where"
    assert rec["held"] is False
    assert [f for f in stack if f.startswith(OURS)] == [], stack
    with pytest.raises(ray.exceptions.RayTaskError) as raised:
        ray.get(fails.remote(), timeout=120)
    text = str(raised.value)
    assert "boom from the task" in text and "fails" in text
    assert OURS not in text, text


def test_each_task_start_names_its_own_task_in_the_record(cluster: tuple[Cluster, Any]) -> None:
    """Tasks in a row: after a worker's first, the gate's quick path writes the record."""
    for _ in range(30):
        before = time.time()
        _, rec, tid = ray.get(where.remote(), timeout=60)
        assert (rec["task_id"], rec["attempt"], rec["held"], rec["name"]) == (tid, 0, False, "where")
        # The quick path leaves the start of the worker's last full check (<= 20 ms before).
        assert before - 1 < rec["start"] < time.time()


def test_an_actors_worker_has_rays_own_task_start(cluster: tuple[Cluster, Any]) -> None:
    """Actor methods are never gated: the worker that became the actor's drops the wrapper."""
    probe = Probe.remote()  # type: ignore[attr-defined]
    assert ray.get([probe.gated.remote() for _ in range(3)], timeout=60) == [False] * 3
    ray.kill(probe)


def test_a_paused_task_shows_no_raydbg_frame_through_the_gateway(
    cluster: tuple[Cluster, Any],
) -> None:
    c, gw = cluster
    ref = paused_here.remote()
    rec = wait_for_session(gw, task_name="paused_here")
    with forward(c.address, rec["id"]) as port:
        files = asyncio.run(_stack_files(port))
    assert ray.get(ref, timeout=60) == 42
    mine = [i for i, f in enumerate(files) if f.endswith("test_memory_gate_frames.py")]
    assert mine, files
    # Below the task's frame (DAP lists the top first): Ray's worker loop only.
    assert [f for f in files[mine[-1] + 1 :] if f.startswith(OURS)] == [], files


async def _stack_files(port: int) -> list[str]:
    from raydbg.dap.session import attach_session
    from raydbg.dap.transport import open_tcp

    client, stopped = await attach_session(*await open_tcp("127.0.0.1", port), timeout=30)
    thread = stopped["body"]["threadId"]
    frames = await client.stack_trace(thread)
    await client.continue_(thread)
    await client.disconnect()
    await client.close()
    return [str(f.get("source", {}).get("path", "")) for f in frames]
