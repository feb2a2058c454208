"""`raydbg continue --job ID` on a real cluster: one CLI call resumes every paused task of that job
(their refs complete), a paused task of another job stays paused until `raydbg continue --all`."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator
from typing import Any

import pytest
import ray

from e2e import targets
from e2e.conftest import REPO, Cluster, wait_for_session

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(400)]

PAUSED = 4

JOB_B = """
import ray, sys
import targets
ray.init(address=sys.argv[1])
print("JOB", ray.get_runtime_context().get_job_id(), flush=True)
print(f"RESULT {ray.get(ray.remote(targets.plain_task).options(num_cpus=0, name='job_b_task').remote(5), timeout=300)}",
      flush=True)
"""


@pytest.fixture(scope="module")
def cluster() -> Iterator[tuple[Cluster, Any]]:
    with Cluster(env={"RAYDBG_WAIT_TIMEOUT": "300"}) as c:
        yield c, c.up()


def _listed(gw: Any) -> list[dict[str, Any]]:
    return list(asyncio.run(gw.sessions()))


def test_continue_job_resumes_that_job_only(cluster: tuple[Cluster, Any]) -> None:
    c, gw = cluster
    mine = str(ray.get_runtime_context().get_job_id())
    env = {**os.environ, "RAY_DEBUG": "1",
           "PYTHONPATH": os.pathsep.join([str(REPO / "tests"), str(REPO / "tests" / "e2e")])}
    job_b = subprocess.Popen([sys.executable, "-c", textwrap.dedent(JOB_B), c.address], env=env,
                             stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        other = wait_for_session(gw, timeout=180, task_name="job_b_task")
        assert other["job_id"] != mine
        task = ray.remote(targets.plain_task)
        refs = [task.options(num_cpus=0, name=f"job_a_{i}").remote(i) for i in range(PAUSED)]
        ids = {str(wait_for_session(gw, timeout=180, task_name=f"job_a_{i}")["id"]) for i in range(PAUSED)}

        out = c.cli("continue", "--job", mine, "--json")  # one CLI call for the whole job
        assert out.returncode == 0, out.stderr
        answer = json.loads(out.stdout)
        assert set(answer["continued"]) == ids and answer["job"] == mine
        assert ray.get(refs, timeout=60) == [i * 3 + 1 for i in range(PAUSED)]

        time.sleep(2.0)  # four resume polls (0.5 s): job B's session had time to resume if it were asked
        left = _listed(gw)
        assert [r["id"] for r in left] == [other["id"]], left
        assert job_b.poll() is None

        gone = c.cli("continue", "--job", mine)
        assert gone.returncode == 1 and gone.stderr == f"raydbg: no paused session of job {mine}: see `raydbg list`\n"

        out = c.cli("continue", "--all")
        assert out.returncode == 0 and out.stdout == "raydbg continue: all jobs: 1 session(s) resume\n", out.stderr
        output = job_b.communicate(timeout=120)[0]
        assert "RESULT 16" in output, output
    finally:
        job_b.kill()
        job_b.wait(10)
