"""Two nodes on this machine (a second raylet): a breakpoint there, an agent and monitor per node, its death.

The second node is a real raylet started with `ray start --address HEAD` (tests/cluster.py);
work is pinned to it with its custom resource. The last test kills that raylet, so it
runs last in this module.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import json
import time
from collections.abc import Iterator
from typing import Any

import psutil
import pytest
import ray
from cluster import FAST_NODE_DEATH, Cluster, Node, node_death_bound_s
from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

from e2e import targets
from e2e.conftest import attach_and_inspect, forward, wait_for_session, wait_gone
from raydbg import registry
from raydbg.agent.dead_records import AGENT_STALE_S
from raydbg.agent_host.actor import HEARTBEAT_S

pytestmark = pytest.mark.e2e

FAR = "node2"
# A dead node's session goes once Ray has declared the node dead, the gateway's collector
# has run (every heartbeat) and its ray.nodes() cache (1 s) has expired; 2 s of slack for load.
GONE_BOUND_S = node_death_bound_s(FAST_NODE_DEATH) + 2 * HEARTBEAT_S + 1.0 + 2.0


@pytest.fixture(scope="module")
def two_nodes() -> Iterator[tuple[Cluster, Node, Any]]:
    with Cluster(num_cpus=2, env={"RAYDBG_WAIT_TIMEOUT": "120"}, system_config=FAST_NODE_DEATH) as cluster:
        far = cluster.add_node(num_cpus=2, resources={FAR: 4})
        gw = cluster.up()
        yield cluster, far, gw


def _raylet_of(pid: int) -> int:
    """The raylet a Ray worker (or agent) belongs to: its nearest `raylet` ancestor."""
    for parent in psutil.Process(pid).parents():
        if parent.name() == "raylet":
            return int(parent.pid)
    raise AssertionError(f"process {pid} has no raylet ancestor")


def _running(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def _raised_after(ref: Any) -> tuple[BaseException | None, float]:
    """What ray.get(ref) raised (None if it returned), and when."""
    try:
        ray.get(ref, timeout=60)
    except BaseException as exc:  # the test checks the type
        return exc, time.monotonic()
    return None, time.monotonic()


def _far_task() -> Any:
    # max_retries=0: a retry could only go to the far node again (its resource), and after the
    # node's death it would wait there for ever as infeasible: that would be Ray's wait, not ours.
    return ray.remote(resources={FAR: 1}, max_retries=0)(targets.plain_task)


def test_breakpoint_on_second_node_is_listed_attached_and_resumed(two_nodes: tuple[Cluster, Node, Any]) -> None:
    cluster, far, gw = two_nodes
    assert far.node_id != cluster.head_node_id()
    ref = _far_task().remote(5)
    rec = wait_for_session(gw, function="plain_task")
    assert rec["node_id"] == far.node_id
    assert _raylet_of(rec["pid"]) == far.raylet_pid()
    with forward(cluster.address, rec["id"]) as port:
        seen = asyncio.run(attach_and_inspect(port, "local_value", expression="local_value * 2"))
    assert seen["top"]["line"] == targets.line_of("task")
    assert seen["value"] == "15" and seen["evaluated"] == "30"
    assert ray.get(ref, timeout=60) == 16
    wait_gone(gw, rec["id"], timeout=30)


def test_stacks_of_both_nodes_are_merged(two_nodes: tuple[Cluster, Node, Any]) -> None:
    """One paused task per node: the gateway's stacks hold both, each labelled with its node."""
    cluster, far, gw = two_nodes
    head = cluster.head_node_id()
    on_head = NodeAffinitySchedulingStrategy(head, soft=False)
    refs = [_far_task().remote(2), ray.remote(scheduling_strategy=on_head)(targets.plain_task).remote(3)]
    sessions = {n: wait_for_session(gw, function="plain_task", node_id=n) for n in (far.node_id, head)}
    pids = {r["pid"] for r in sessions.values()}

    def waiting(w: dict[str, Any]) -> bool:
        return any(t["paused"] and t["frames"] and t["frames"][0]["function"] == "wait_for_client"
                   for t in w["threads"])

    # A session is attachable a moment before its thread waits (the pause's telemetry set-up
    # comes after: raydbg/worker/session.py): ask until both threads wait, as a user would see.
    deadline = time.monotonic() + 60
    while True:
        answer = asyncio.run(gw.get("/api/v1/stacks", timeout=60))
        mine = {w["node_id"]: w for w in answer["workers"] if w["pid"] in pids}
        if (len(mine) == 2 and all(waiting(w) for w in mine.values())) or time.monotonic() > deadline:
            break
        time.sleep(0.5)
    assert answer["errors"] == []
    assert set(mine) == {far.node_id, head}
    for node_id, worker in mine.items():
        assert worker["pid"] == sessions[node_id]["pid"] and worker["paused"] is True
        frames = [f for t in worker["threads"] for f in t["frames"]]
        assert any(f["function"] == "plain_task" and f["line"] == targets.line_of("task") for f in frames)
    # Both paused at the same line: one class, with a member from each node.
    ours = [c for c in answer["classes"] if {m["pid"] for m in c["members"]} & {w["pid"] for w in mine.values()}]
    assert len(ours) == 1, [(c["summary"], c["members"], c["frames"][:4]) for c in ours]
    (cls,) = ours
    assert {m["node_id"] for m in cls["members"]} >= {far.node_id, head} and cls["paused"] is True
    for rec in sessions.values():
        with forward(cluster.address, rec["id"]) as port:
            asyncio.run(attach_and_inspect(port, "local_value"))
    assert ray.get(refs, timeout=60) == [7, 10]


def _monitor_state(agent: dict[str, Any]) -> dict[str, Any]:
    """The node's memory monitor as it reports itself (memory/<node_id>, refreshed every second)."""
    state = registry.get("memory/" + agent["node_id"])
    assert state is not None, f"no memory monitor status for node {agent['node_id']}"
    return state


def _status_agents(cluster: Cluster) -> dict[str, dict[str, Any]]:
    out = cluster.cli("status", "--json")
    assert out.returncode == 0, out.stderr
    return {a["node_id"]: a for a in json.loads(out.stdout)["agents"]}


def test_status_shows_an_agent_and_a_memory_monitor_per_node(two_nodes: tuple[Cluster, Node, Any]) -> None:
    cluster, far, _ = two_nodes
    head = cluster.head_node_id()
    # A monitor is "starting" until its first report (imports and a GCS round trip).
    deadline = time.monotonic() + 60
    while True:
        agents = _status_agents(cluster)
        states = {n: a.get("memory_monitor", {}).get("state") for n, a in agents.items()}
        if set(states.values()) == {"running"} or time.monotonic() > deadline:
            break
        time.sleep(1)
    assert set(agents) == {head, far.node_id}
    assert states == {head: "running", far.node_id: "running"}
    assert agents[head]["is_head"] and not agents[far.node_id]["is_head"]
    assert _raylet_of(agents[far.node_id]["pid"]) == far.raylet_pid()
    assert _raylet_of(agents[head]["pid"]) != far.raylet_pid()
    for node_id, agent in agents.items():
        # The monitor's own report, and its process: alive, for this node, watching this node's raylet.
        state = _monitor_state(agent)
        assert time.time() - state["ts"] < 3 * HEARTBEAT_S + 2
        monitor = psutil.Process(state["pid"])
        cmdline = monitor.cmdline()
        assert monitor.is_running() and "raydbg.memory.service" in cmdline
        assert cmdline[cmdline.index("--node-id") + 1] == node_id
        assert int(cmdline[cmdline.index("--watch-pid") + 1]) == _raylet_of(agent["pid"])


def test_second_node_dies_while_a_session_is_paused_there(two_nodes: tuple[Cluster, Node, Any]) -> None:
    cluster, far, gw = two_nodes
    ref = _far_task().remote(7)
    rec = wait_for_session(gw, function="plain_task")
    assert rec["node_id"] == far.node_id
    monitor_pid = _monitor_state({"node_id": far.node_id})["pid"]
    failed = concurrent.futures.ThreadPoolExecutor(1).submit(_raised_after, ref)
    far.kill_raylet()
    killed = time.monotonic()
    wait_gone(gw, rec["id"], timeout=60)
    gone_s = time.monotonic() - killed
    assert gone_s < GONE_BOUND_S, f"session left the list {gone_s:.1f}s after the node died"
    error, at = failed.result(timeout=60)
    assert isinstance(error, ray.exceptions.RayError), error
    failed_s = at - killed
    assert failed_s < GONE_BOUND_S, f"the job learnt of the dead node only after {failed_s:.1f}s"
    print(f"\nnode death: session gone after {gone_s:.2f}s, ray.get raised after {failed_s:.2f}s "
          f"(bound {GONE_BOUND_S:.1f}s)")
    # The gateway keeps serving, and reports the cluster as it now is.
    while True:
        agents = [a["node_id"] for a in asyncio.run(gw.status())["agents"]]
        if agents == [cluster.head_node_id()]:
            break
        assert time.monotonic() - killed < GONE_BOUND_S + AGENT_STALE_S, f"dead node's agent still listed: {agents}"
        time.sleep(0.2)
    # Stacks ask the agents still listed: the dead node is neither asked nor an error.
    answer = asyncio.run(gw.get("/api/v1/stacks", timeout=60))
    assert answer["errors"] == [] and far.node_id not in {w["node_id"] for w in answer["workers"]}
    nodes = {n["node_id"]: n for n in asyncio.run(gw.nodes())}
    assert nodes[far.node_id]["alive"] is False and nodes[cluster.head_node_id()]["alive"] is True
    events = asyncio.run(gw.events())
    assert any(e["kind"] == "session.collected" and e["details"]["session"] == rec["id"] for e in events)
    # The dead node's memory monitor went with its raylet.
    deadline = time.monotonic() + 10
    while _running(monitor_pid):
        assert time.monotonic() < deadline, f"memory monitor {monitor_pid} outlived its node's raylet"
        time.sleep(0.2)
    # And the head still debugs: a breakpoint there is listed and attachable.
    ref = ray.remote(targets.plain_task).remote(1)
    rec = wait_for_session(gw, function="plain_task")
    assert rec["node_id"] == cluster.head_node_id()
    with forward(cluster.address, rec["id"]) as port:
        assert asyncio.run(attach_and_inspect(port, "local_value"))["value"] == "3"
    assert ray.get(ref, timeout=60) == 4
