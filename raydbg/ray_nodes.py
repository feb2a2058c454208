"""Ray's node table through the public API: the nodes, the alive ones, the head (no Ray import at load)."""

from __future__ import annotations

import time
from typing import Any

# Ray's own marker of the head node among a node's resources in `ray.nodes()`.
HEAD_RESOURCE = "node:__internal_head__"

_cache: dict[str, Any] = {"at": float("-inf"), "nodes": []}


def nodes(max_age_s: float = 0.0) -> list[dict[str, Any]]:
    """`ray.nodes()` (a GCS round trip); with `max_age_s`, an answer at most that old is reused."""
    if max_age_s <= 0 or time.monotonic() - _cache["at"] > max_age_s:
        import ray

        _cache["nodes"] = ray.nodes()
        _cache["at"] = time.monotonic()
    return list(_cache["nodes"])


def is_head(node: dict[str, Any]) -> bool:
    return HEAD_RESOURCE in (node.get("Resources") or {})


def alive_node_ids(max_age_s: float = 0.0) -> set[str]:
    return {str(n["NodeID"]) for n in nodes(max_age_s) if n.get("Alive")}


def head_node_id() -> str | None:
    for n in nodes():
        if n.get("Alive") and is_head(n):
            return str(n["NodeID"])
    return None
