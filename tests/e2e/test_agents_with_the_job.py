"""RAY_DEBUG=1 is all it takes: the job's driver brings the agents up (no `raydbg up`, no pause).

With the agents come the memory monitor, the stacks and the hang detector; RAYDBG_AGENTS=off
leaves all of it to `raydbg up`.
"""

from __future__ import annotations

import json
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest
import ray

from e2e.conftest import Cluster, wait_until
from e2e.history_support import history

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(600)]

HANG_AFTER_S = 6  # as in test_gang_train: checks each 1.5 s, the event well within the waits


def stuck_after_one_beat() -> None:
    """Beats once, then makes no progress (a rank stuck before its next step)."""
    import raydbg

    raydbg.progress(1)
    time.sleep(600)


def _status(c: Cluster) -> dict[str, Any] | None:
    out = c.cli("status", "--json")
    return json.loads(out.stdout) if out.returncode == 0 else None


def test_the_job_brings_the_agents_monitor_stacks_and_hang_detection_up() -> None:
    env = {"RAYDBG_HANG_AFTER_S": str(HANG_AFTER_S)}
    with Cluster(num_cpus=2, env=env, by_value=(sys.modules[__name__],)) as c:
        connected = time.monotonic()
        # No `raydbg up` and nothing paused: the driver's connect started them.
        status = wait_until(what="no agent registered", timeout=60, every=0.5, check=lambda: _status(c))
        took = time.monotonic() - connected
        (agent,) = status["agents"]
        assert agent["is_head"] and agent["node_id"] == c.head_node_id()
        job = ray.get_runtime_context().get_job_id()
        assert agent["started_by"].startswith(f"job {job} (pid "), agent
        assert agent["watches_nodes"] is True
        assert f"started by job {job} (pid " in c.cli("status").stdout
        running = wait_until(what="the memory monitor not running", timeout=60, every=0.5, check=lambda: (
            [a for a in (_status(c) or {"agents": []})["agents"]
             if (a.get("memory_monitor") or {}).get("state") == "running"]))
        assert running[0]["node_id"] == agent["node_id"]
        print(f"agents registered {took:.1f}s after the driver connected")

        ref = ray.remote(stuck_after_one_beat).remote()
        stacks = wait_until(what="the stuck task not in `raydbg stacks`", timeout=60, every=0.5, check=lambda: (
            [w for w in json.loads(c.cli("stacks", "--json", "--job", job).stdout or "{}").get("workers", [])
             if w.get("task_name") == "stuck_after_one_beat"]))
        assert stacks[0]["threads"], stacks[0]
        hangs = wait_until(what="no hang event", timeout=120, every=0.5, check=lambda: (
            [e for e in json.loads(c.cli("events", "--json").stdout or "[]")
             if e.get("kind") == "hang" and (e.get("details") or {}).get("job_id") == job]))
        assert hangs[0]["details"]["stalled_for_s"] >= HANG_AFTER_S
        ray.cancel(ref, force=True)


def _waiting_for_go(thread: threading.Thread) -> bool:
    """The driver's agent-start thread is still waiting for its first result (or the bound)."""
    frame = sys._current_frames().get(thread.ident or 0)
    names = []
    while frame is not None:
        names.append(frame.f_code.co_name)
        frame = frame.f_back
    return "_ensure_all_quietly" in names and "wait" in names and "start_missing_agents" not in names


def test_the_agents_start_once_the_driver_has_its_first_result(monkeypatch: pytest.MonkeyPatch) -> None:
    from raydbg.agent_host import lifecycle

    monkeypatch.setattr(lifecycle, "START_AFTER_S", 120.0)  # only the first result can start them
    with Cluster(num_cpus=2) as c:
        (start,) = [t for t in threading.enumerate() if t.name == "raydbg-start-agents" and t.is_alive()]
        time.sleep(1.0)
        assert _waiting_for_go(start) and _status(c) is None  # connected, no result yet: nothing started
        assert ray.get(ray.remote(lambda: 1).remote(), timeout=60) == 1
        wait_until(what="the start thread still waiting after the first result", timeout=5, every=0.5, check=lambda: not _waiting_for_go(start))
        status = wait_until(what="no agent registered after the first result", timeout=60, every=0.5, check=lambda: _status(c))
        assert status["agents"][0]["is_head"]


def test_with_agents_off_nothing_starts_until_raydbg_up() -> None:
    with Cluster(num_cpus=2, env={"RAYDBG_AGENTS": "off"}, by_value=(sys.modules[__name__],)) as c:
        # The auto start registers within a few seconds (above); give it more than that.
        assert ray.get(ray.remote(lambda: 1).remote(), timeout=60) == 1
        time.sleep(10)
        off = c.cli("status")
        assert off.returncode == 1 and "not active" in off.stderr, off
        assert c.cli("stacks", "--json").returncode == 1  # no gateway to ask
        c.up()
        (agent,) = _status(c)["agents"]  # type: ignore[index]
        assert agent["started_by"].startswith("raydbg up (pid "), agent
        assert agent["watches_nodes"] is False  # an operator's agents: the operator starts new nodes' too


def test_a_node_that_joins_later_gets_its_agent_from_the_head() -> None:
    with Cluster(num_cpus=2) as c:
        wait_until(what="no head agent", timeout=60, every=0.5, check=lambda: _status(c))
        far = c.add_node(num_cpus=1)
        agents = wait_until(what="the new node's agent not registered", timeout=90, every=0.5, check=lambda: (
            [a for a in (_status(c) or {"agents": []})["agents"] if a["node_id"] == far.node_id]))
        assert agents[0]["started_by"].startswith("the head's agent (pid "), agents[0]
        assert agents[0]["is_head"] is False


def test_the_last_seconds_before_the_drivers_own_cluster_goes_reach_the_record(tmp_path: Path) -> None:
    """The cluster's processes are killed when the driver that started it shuts Ray down: the
    gateway never gets to its next round (every 2 s). The driver asks for one first."""
    import secrets

    from raydbg import registry, schema

    where = tmp_path / "history"
    with Cluster(num_cpus=1, env={"RAYDBG_HISTORY": str(where)}) as c:
        assert ray.get(ray.remote(lambda: 1).remote(), timeout=60) == 1
        wait_until(what="no gateway", timeout=60, every=0.2, check=lambda: registry.get(registry.GATEWAY))
        job = ray.get_runtime_context().get_job_id()
        last = registry.put_event(schema.Event(id=secrets.token_hex(4), ts=time.time(), kind="test.last",
                                               message="the last thing before teardown", details={"job_id": job}))
        c.shutdown()  # at once, well within the recorder's 2 s
    shown = history("show", job, str(where), "--json")
    assert shown.returncode == 0, shown.stderr
    assert last["id"] in [e["id"] for e in json.loads(shown.stdout)["events"]], shown.stdout
