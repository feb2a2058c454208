"""The Ray context of the current worker: its job, task, actor, Train rank and node (no Ray import at load)."""

from __future__ import annotations

import os
import sys
from typing import Any


def _hex(value: Any) -> str | None:
    if value is None:
        return None
    return value if isinstance(value, str) else value.hex()


def connected_ray() -> Any | None:
    """The `ray` module if this process already imported it and is connected (never imports Ray)."""
    ray = sys.modules.get("ray")
    if ray is None:
        return None
    try:
        return ray if ray.is_initialized() else None
    except Exception:
        return None


def train_rank() -> int | None:
    """World rank when this thread runs a Ray Train worker's training function (never imports Ray Train)."""
    if "ray.train" not in sys.modules:
        return None
    try:
        import ray.train

        return int(ray.train.get_context().get_world_rank())
    except Exception:
        return None


def train_fields() -> dict[str, Any]:
    """Train fields of a session record: train_rank, train_local_rank, train_world_size,
    train_run; all None outside a Ray Train worker or its training function."""
    out: dict[str, Any] = {
        "train_rank": None, "train_run": None, "train_local_rank": None, "train_world_size": None,
    }
    if "ray.train" not in sys.modules:
        return out
    try:
        import ray.train

        ctx = ray.train.get_context()
        out["train_rank"] = int(ctx.get_world_rank())
        out["train_local_rank"] = int(ctx.get_local_rank())
        out["train_world_size"] = int(ctx.get_world_size())
        out["train_run"] = str(ctx.get_experiment_name())
    except Exception:
        pass  # not a Train worker (get_context raises), or not in its training function
    return out


def ray_context() -> dict[str, Any]:
    """Fields of the session record that describe the Ray side; empty outside Ray."""
    try:
        import ray

        if not ray.is_initialized():
            return {"job_id": "", "node_id": "", "node_ip": ""}
        ctx = ray.get_runtime_context()
        actor_id = _hex(ctx.get_actor_id())
        task_name = _task_name(ctx)
        actor_name = None
        if actor_id:
            # Named actors have a name; otherwise the class, from "Class.method".
            actor_name = ctx.get_actor_name() or (task_name or "").split(".")[0] or None
        return {
            "job_id": _hex(ctx.get_job_id()) or "",
            "task_id": _hex(ctx.get_task_id()),
            "task_name": task_name,
            "actor_id": actor_id,
            "actor_name": actor_name,
            "node_id": _hex(ctx.get_node_id()) or "",
            "node_ip": ray.util.get_node_ip_address(),
            **train_fields(),  # world rank, local rank, size, run
        }
    except Exception:
        return {"job_id": "", "node_id": "", "node_ip": ""}


def _task_name(ctx: Any) -> str | None:
    try:
        return ctx.get_task_name()
    except Exception:
        return None


def cwd() -> str:
    try:
        return os.getcwd()
    except OSError:
        return ""
