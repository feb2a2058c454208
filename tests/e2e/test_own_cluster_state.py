"""Two Ray clusters on one machine, each with its dashboard (a shared node: another user's
cluster, started later, is the one Ray's own lookup picks): the gateway's question "does this
task still run?" (raydbg/gang/hang_service.py, before a non-Train job's hang event) goes to
its own cluster's State API, and this process's KV client (raydbg's registry) stays on its
own GCS. Ray's `get_task` with no address asked the other cluster and pointed the process's
KV client at it."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator

import pytest
from cluster import forget_ray_auth_state, free_ports, without_ray_auto_connect

from raydbg import _ray_internals, registry
from raydbg.gang import hang_service

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(300)]

OTHER = textwrap.dedent("""
    import signal, sys, time
    from ray.cluster_utils import Cluster

    other = Cluster(initialize_head=True, head_node_args={
        "num_cpus": 1, "include_dashboard": True, "dashboard_port": int(sys.argv[1])})
    signal.signal(signal.SIGTERM, lambda *_: (other.shutdown(), sys.exit(0)))
    print(other.address, flush=True)
    time.sleep(600)
""")


@pytest.fixture(scope="module")
def own_and_other() -> Iterator[tuple[str, str]]:
    """(this driver's cluster's GCS address, the other cluster's), the other started last."""
    import ray
    from ray.cluster_utils import Cluster

    if ray.is_initialized():
        ray.shutdown()
    forget_ray_auth_state()
    own_port, other_port = free_ports(2)
    own = Cluster(initialize_head=True, head_node_args={
        "num_cpus": 1, "include_dashboard": True, "dashboard_port": own_port})
    other = subprocess.Popen([sys.executable, "-c", OTHER, str(other_port)], stdout=subprocess.PIPE,
                             text=True, start_new_session=True)
    try:
        other_address = other.stdout.readline().strip() if other.stdout else ""
        assert other_address, "the other cluster did not start"
        ray.init(address=own.address)
        yield own.address, other_address
    finally:
        other.terminate()
        try:
            other.wait(60)
        except subprocess.TimeoutExpired:
            os.killpg(other.pid, signal.SIGKILL)
        with without_ray_auto_connect():
            ray.shutdown()
            own.shutdown()


def test_a_finished_task_is_asked_of_this_clusters_state_api(own_and_other: tuple[str, str]) -> None:
    import ray
    from ray.util.state import get_task

    own, other = own_and_other
    assert registry.client().address == own

    @ray.remote
    def quick() -> int:
        return 1

    ref = quick.remote()
    assert ray.get(ref) == 1
    task_id = ref.task_id().hex()
    url = _ray_internals.dashboard_url(registry.client())
    assert url is not None
    deadline = time.monotonic() + 60  # task events reach the State API within a few seconds
    while getattr(get_task(task_id, address=url, timeout=5), "state", None) != "FINISHED":
        assert time.monotonic() < deadline, "the task's end never reached its cluster's State API"
        time.sleep(0.5)
    # Ray's lookup with no address would ask `other` (the latest cluster), which knows no such
    # task: "unknown", counted as running.
    assert hang_service.still_running(("job", ""), [{"task_id": task_id}]) is False
    assert registry.client().address == own  # the registry still talks to its own cluster
