"""Starting and stopping node agents: explicitly (`raydbg up/down`) or on a worker's first pause (its listener)."""

from __future__ import annotations

import logging
import threading
import time
from typing import Any

from raydbg import ray_nodes, registry
from raydbg.config import NAMESPACE, agent_name
from raydbg.ray_nodes import head_node_id
from raydbg.records import SessionRecord

log = logging.getLogger("raydbg")

_ensured: set[str] = set()
_ensure_lock = threading.Lock()


def ensure_agent(node_id: str, is_head: bool) -> Any:
    """Get or create the agent actor of `node_id` (idempotent, race-free by name)."""
    import ray
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    from raydbg.agent_host.actor import NodeAgent

    actor_cls = ray.remote(NodeAgent)
    return actor_cls.options(  # type: ignore[attr-defined]
        name=agent_name(node_id),
        namespace=NAMESPACE,
        get_if_exists=True,
        lifetime="detached",
        num_cpus=0,
        max_restarts=-1,
        max_task_retries=-1,
        scheduling_strategy=NodeAffinitySchedulingStrategy(node_id, soft=False),
        # The agent must not run a job's hooks or take over its own breakpoints.
        runtime_env={"env_vars": {"RAY_DEBUG": "0", "RAYDBG_AGENT": "1"}},
    ).remote(node_id, is_head)


def ensure_agents_for(rec: SessionRecord) -> None:
    """A session opened (the worker's pause listener): its node's agent and the gateway."""
    ensure_agents_soon(rec.node_id)


def ensure_agents_soon(node_id: str) -> None:
    """From a pausing worker: make sure this node's agent and the gateway exist (background)."""
    with _ensure_lock:
        if node_id in _ensured or not node_id:
            return
        _ensured.add(node_id)
    threading.Thread(target=_ensure_quietly, args=(node_id,), name="raydbg-ensure-agents", daemon=True).start()


def _ensure_quietly(node_id: str) -> None:
    try:
        head = head_node_id()
        if head and head != node_id and registry.get(registry.GATEWAY) is None:
            ensure_agent(head, True)
        if registry.get(registry.AGENT + node_id) is None:
            ensure_agent(node_id, node_id == head)
    except Exception:
        log.exception("raydbg: could not start node agents")
        with _ensure_lock:
            _ensured.discard(node_id)


def up(timeout: float = 60.0) -> list[dict[str, Any]]:
    """Start an agent on every alive node; wait until each has registered."""
    import ray

    head = head_node_id()
    alive = [str(n["NodeID"]) for n in ray_nodes.nodes() if n.get("Alive")]
    handles = [ensure_agent(nid, nid == head) for nid in alive]
    ray.get([h.ping.remote() for h in handles], timeout=timeout)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        agents = {a["node_id"]: a for a in registry.agents()}
        if all(nid in agents for nid in alive):
            return [agents[nid] for nid in alive]
        time.sleep(0.1)
    raise TimeoutError("raydbg agents did not register in time")


def down() -> int:
    """Stop every agent; return how many were stopped."""
    import ray

    stopped = 0
    for agent in registry.agents():
        try:
            handle = ray.get_actor(agent_name(agent["node_id"]), namespace=NAMESPACE)
        except ValueError:
            registry.delete(registry.AGENT + agent["node_id"])
            continue
        try:
            ray.get(handle.shutdown.remote(), timeout=10)
        except Exception:
            pass
        ray.kill(handle, no_restart=True)
        stopped += 1
    registry.delete(registry.GATEWAY)
    return stopped


def gateway_address() -> str | None:
    info = registry.get(registry.GATEWAY)
    return str(info["address"]) if info else None
