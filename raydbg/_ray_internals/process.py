"""This process as Ray's worker object knows it: driver or worker, session directory,
node, running task.

Written for Ray 2.51.x to 2.60.x (each name below read in 2.51.2, 2.55.1 and 2.60.0). Relies on `ray._private.worker`'s `global_worker` (`mode`,
`node`, `current_task_id`), `WORKER_MODE`, `SCRIPT_MODE` and `_global_node`
(`get_session_dir_path()`, `session_name`, `node_ip_address`, `head`: true only where this
process started the head node, `ray.init()` of a local cluster). The mode, session and node
reads import nothing (Ray not imported yet: no answer); each read gives None (or {}) where
Ray has no answer.
"""

from __future__ import annotations


def worker_mode() -> str | None:
    """`worker` or `driver` as Ray sees this process (set early in connect), else None."""
    import sys

    ray = sys.modules.get("ray")
    try:
        mode = ray._private.worker.global_worker.mode if ray is not None else None
        if mode == ray._private.worker.WORKER_MODE:  # type: ignore[union-attr]
            return "worker"
        if mode == ray._private.worker.SCRIPT_MODE:  # type: ignore[union-attr]
            return "driver"
    except Exception:
        pass
    return None


def session_dir() -> str | None:
    """The connected node's Ray session directory, or None."""
    import sys

    ray = sys.modules.get("ray")
    try:
        node = ray._private.worker._global_node or getattr(  # type: ignore[union-attr]
            ray._private.worker.global_worker, "node", None  # type: ignore[union-attr]
        )
        return str(node.get_session_dir_path()) if node is not None else None
    except Exception:
        return None


def owns_cluster() -> bool:
    """This process started the cluster it is connected to (`ray.init()` with no cluster to
    join): the cluster goes down with its `ray.shutdown()` or its exit."""
    import sys

    ray = sys.modules.get("ray")
    try:
        node = ray._private.worker._global_node if ray is not None else None
        return bool(node is not None and getattr(node, "head", False))
    except Exception:
        return False


def node_identity() -> dict[str, str]:
    """`ray.session_name` and `ray.node_ip` of the connected node (`_global_node`), if known."""
    import sys

    ray = sys.modules.get("ray")
    try:
        node = ray._private.worker._global_node  # type: ignore[union-attr]
        if node is None:
            return {}
        return {"ray.session_name": node.session_name, "ray.node_ip": node.node_ip_address}
    except Exception:
        return {}



def current_task_id_hex() -> str | None:
    """The running task's id in this worker or driver (the public getter warns in a driver)."""
    try:
        import ray

        return str(ray._private.worker.global_worker.current_task_id.hex())
    except Exception:
        return None
