"""The dead-record collector's choice of records to remove: dead workers here, dead nodes' sessions and agents."""

from __future__ import annotations

import os

from raydbg.agent.dead_records import AGENT_STALE_S, dead_agents, dead_sessions

HERE, FAR, GONE = "node-here", "node-far", "node-gone"


def _dead_pid() -> int:
    pid = os.fork()
    if pid == 0:
        os._exit(0)
    os.waitpid(pid, 0)
    return pid


def test_sessions_of_this_node_go_when_their_worker_is_gone() -> None:
    alive, dead = {"id": "a", "node_id": HERE, "pid": os.getpid()}, {"id": "b", "node_id": HERE, "pid": _dead_pid()}
    assert dead_sessions([alive, dead], HERE, None) == [dead]


def test_only_the_gateway_removes_sessions_of_other_nodes_and_only_of_dead_ones() -> None:
    far = {"id": "f", "node_id": FAR, "pid": 1}
    gone = {"id": "g", "node_id": GONE, "pid": 1}
    assert dead_sessions([far, gone], HERE, None) == []  # a node agent: not its business
    assert dead_sessions([far, gone], HERE, {HERE, FAR}) == [gone]


def test_a_dead_nodes_agent_goes_once_it_stopped_beating() -> None:
    now = 1000.0
    here = {"node_id": HERE, "heartbeat": now - 100}  # its node is alive: kept however old
    gone = {"node_id": GONE, "heartbeat": now - AGENT_STALE_S - 0.1}
    assert dead_agents([here, gone], {HERE}, now) == [gone]


def test_a_fresh_agent_of_a_node_not_yet_seen_alive_is_kept() -> None:
    now = 1000.0
    joined = {"node_id": FAR, "started_at": now - 0.5}  # no heartbeat yet
    beating = {"node_id": FAR, "heartbeat": now - 1}
    assert dead_agents([joined, beating], {HERE}, now) == []
    assert dead_agents([{"node_id": FAR}], {HERE}, now) == [{"node_id": FAR}]  # no times at all: long dead
