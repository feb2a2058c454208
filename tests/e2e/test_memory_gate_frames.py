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
from raydbg.memory import start_gate

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
        # The quick path leaves the start of the worker's last full check, whose ticket
        # (TICKET_S) ran from that very start: never older than that before this task began.
        assert before - start_gate.TICKET_S <= rec["start"] < time.time(), (before, rec["start"])


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


JOB_B = """
import ray, sys
ray.init(address=sys.argv[1])

@ray.remote(max_retries=0)
def once() -> int:
    return 1

print("JOB", ray.get_runtime_context().get_job_id(), ray.get(once.remote(), timeout=120), flush=True)
"""


def test_an_ended_jobs_budgets_are_pruned_a_running_jobs_kept(cluster: tuple[Cluster, Any]) -> None:
    """What the head's agent does every minute (memory/budgets.prune_ended_jobs), against
    Ray's real job table: a second driver that ran and exited, and this running job."""
    import subprocess

    from raydbg import registry
    from raydbg.gcs_tables import GcsTables
    from raydbg.memory import budgets

    c, _ = cluster
    mine = str(ray.get_runtime_context().get_job_id())
    ray.get(where.options(max_retries=0).remote(), timeout=120)  # a budget of this job's own
    out = subprocess.run([sys.executable, "-c", JOB_B, c.address], env={**os.environ, "RAY_DEBUG": "1"},
                         capture_output=True, text=True, timeout=180)
    line = next((x for x in out.stdout.splitlines() if x.startswith("JOB ")), "")
    assert line.endswith(" 1"), out.stdout + out.stderr
    ended = line.split()[1]

    def records(job: str) -> list[str]:
        return [k for p in (budgets.PREFIX, budgets.FUNCTION) for k in registry.keys(f"{p}{job}/")]

    assert records(ended) and records(mine)
    deadline = time.monotonic() + 60
    while ended not in (jobs := GcsTables().ended_jobs()):
        assert time.monotonic() < deadline, f"job {ended} never marked ended"
        time.sleep(0.2)
    assert mine not in jobs
    done: set[str] = set()
    assert ended in budgets.prune_ended_jobs(jobs, done)
    assert records(ended) == [] and records(mine)  # the running job's budgets stay
    assert budgets.prune_ended_jobs(GcsTables().ended_jobs(), done) == []  # each job once
