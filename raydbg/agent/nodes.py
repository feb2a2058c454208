"""What the gateway reports about nodes: liveness, memory, GPUs, workers, agents."""

from __future__ import annotations

from typing import Any

import psutil

from raydbg import ray_nodes, ray_processes, registry

# ray.nodes() is a GCS round trip; the heartbeat and the API share one answer a second.
NODES_MAX_AGE_S = 1.0


def alive_node_ids() -> set[str]:
    return ray_nodes.alive_node_ids(NODES_MAX_AGE_S)


_measurer: Any = None


def node_memory(measured: Any = None) -> dict[str, int]:
    """Memory used/limit measured the way the memory monitor (and the kernel) judges it.

    `measured`: the running monitor's own last measurement (its status record's `memory`),
    taken as it is: the node is then measured once, by the monitor."""
    global _measurer
    if isinstance(measured, dict) and isinstance(measured.get("used"), int) and isinstance(measured.get("limit"), int):
        return {"used": measured["used"], "limit": measured["limit"]}
    try:
        from raydbg.memory.node_memory import NodeMeasurer

        if _measurer is None:
            _measurer = NodeMeasurer(psi=False)
        node = _measurer.read()
        return {"used": int(node.used), "limit": int(node.limit)}
    except Exception:
        vm = psutil.virtual_memory()
        return {"used": int(vm.total - vm.available), "limit": int(vm.total)}


def count_ray_workers() -> int:
    """Workers of this node: the raylet's `ray::...` children but Ray's daemons (the agent
    and Ray's I/O workers count)."""
    prefix = ray_processes.PREFIX
    try:
        names = [p.name() for p in ray_processes.raylet_children()]
    except psutil.Error:
        return 0
    return sum(1 for n in names if n.startswith(prefix) and n[len(prefix):] not in ray_processes.DAEMONS)


def cluster_nodes() -> list[dict[str, Any]]:
    agents = {a["node_id"]: a for a in registry.agents()}
    out = []
    for n in ray_nodes.nodes(NODES_MAX_AGE_S):
        agent = agents.get(n["NodeID"])
        out.append({
            "node_id": n["NodeID"],
            "node_ip": n.get("NodeManagerAddress"),
            "is_head": ray_nodes.is_head(n),
            "alive": bool(n.get("Alive")),
            "memory": agent.get("memory") if agent else None,
            "gpus": agent.get("gpus", []) if agent else [],
            "workers": agent.get("workers") if agent else None,
            "agent": agent,
        })
    return out
