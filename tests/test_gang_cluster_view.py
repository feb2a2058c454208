"""The gateway's cluster-wide stacks ask each agent once: its stacks and its progress beats in one answer (no Ray)."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import pytest

from raydbg import dial, progress_records, registry
from raydbg.gang import cluster_view, node


def _rank(rank: int, node_id: str, pid: int) -> dict[str, Any]:
    return {"node_id": node_id, "pid": pid, "job_id": "j", "train_run": "run", "world_rank": rank, "world_size": 2,
            "threads": [{"thread_id": 1, "name": "MainThread", "paused": False, "idle": False,
                         "frames": [{"function": "step", "file": "/job/train.py", "line": 3}]}]}


def test_one_fan_out_brings_every_nodes_stacks_and_beats(monkeypatch: pytest.MonkeyPatch) -> None:
    now = time.time()
    asked: list[str] = []

    async def ask_agents(path: str, params: Any = None, **kw: Any) -> tuple[list[Any], list[dict[str, str]]]:
        asked.append(path)
        beat = {"pid": 22, "node_id": "n2", "job_id": "j", "train_run": "run", "world_rank": 1, "step": 3,
                "source": "progress", "ts": now - 30}
        return [{"node_id": "n2", "workers": [_rank(1, "n2", 22)], "progress": [beat]}], []

    async def own_stacks(*args: Any, **kw: Any) -> list[dict[str, Any]]:
        return [_rank(0, "n1", 11)]

    monkeypatch.setattr(registry, "agents", lambda: [{"node_id": "n1", "node_ip": "10.0.0.1", "port": 1},
                                                    {"node_id": "n2", "node_ip": "10.0.0.2", "port": 1}])
    monkeypatch.setattr(dial, "ask_agents", ask_agents)
    monkeypatch.setattr(node, "node_stacks", own_stacks)
    monkeypatch.setattr(progress_records, "read_all", lambda: [
        {"pid": 11, "job_id": "j", "train_run": "run", "world_rank": 0, "ts": now - 5}])
    monkeypatch.setattr(cluster_view, "_train_runs", lambda: [])
    answer = asyncio.run(cluster_view.cluster_stacks(token="t", self_node_id="n1"))
    assert asked == ["/api/v1/node/stacks"]  # the beats came with the stacks: no second round
    ages = {r["world_rank"]: r["last_progress_s"] for r in answer["runs"][0]["ranks"]}
    assert 4 < ages[0] < 60 and 29 < ages[1] < 90 and answer["errors"] == []
