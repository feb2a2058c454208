"""Cluster-wide stacks on the gateway: Train labels once, every agent asked in parallel, merged, grouped.

A node that does not answer becomes an entry in `errors`; the rest of the answer stands.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from functools import partial
from types import SimpleNamespace
from typing import Any

import aiohttp

from raydbg import registry
from raydbg.gang import classes, node, worker_labels

AGENT_TIMEOUT_S = 15.0
TRAIN_WAIT_S = 1.0  # how long the merged answer waits for Train's state actor after the dumps


async def _blocking(fn: Callable[..., Any], *args: Any) -> Any:
    return await asyncio.get_running_loop().run_in_executor(None, partial(fn, *args))


def agent_base_url(node_id: str, nodes: list[dict[str, Any]]) -> str:
    """The one place that picks the address of another node's agent (blocking).

    Same rule as the relay (raydbg/agent/dial.py): the IP from Ray's node table, the
    port from the agent actor itself, never from a KV record alone.
    """
    from raydbg.agent import dial

    ip, port = dial.check(node_id, nodes, dial.ask_agent(node_id))
    return f"http://{ip}:{port}"


def _ray_nodes() -> list[dict[str, Any]]:
    import ray

    return list(ray.nodes())


def _train_runs() -> list[dict[str, Any]]:
    from raydbg import _ray_internals

    try:
        return _ray_internals.train_runs()
    except Exception:
        return []  # no Train state (or it is slow to answer): stacks without Train labels


async def _progress(token: str, node_id: str) -> dict[Any, float]:
    try:
        from raydbg import progress_records as progress
        from raydbg.gang import train_api

        recs, _ = await train_api.merged_progress(SimpleNamespace(token=token, node_id=node_id))
        return progress.as_progress_map(recs)
    except Exception:
        return {}


def _query(pids: list[int] | None, job: str | None, run: str | None, native: bool,
           use_pyspy: bool) -> dict[str, str]:
    q = {"native": "1" if native else "0", "pyspy": "1" if use_pyspy else "0"}
    if pids is not None:
        q["pids"] = ",".join(map(str, pids))
    if job:
        q["job"] = job
    if run:
        q["run"] = run
    return q


async def cluster_stacks(job: str | None = None, run: str | None = None, native: bool = False, *,
                         token: str = "", self_node_id: str = "", use_pyspy: bool = True) -> dict[str, Any]:
    """The /api/v1/stacks answer (see docs/hangs.md for the shape)."""
    start = time.monotonic()
    # Train's state actor (when there is one) is asked while the agents dump: each agent
    # knows its own ranks from the progress records and filters by run itself, so the
    # state actor's labels are only merged in afterwards (its first lookup imports
    # Ray Train: seconds, measured 4 s on a loaded 2-core machine).
    train = asyncio.ensure_future(_blocking(_train_runs))
    agents = await _blocking(registry.agents)
    errors: list[dict[str, Any]] = []
    workers: list[dict[str, Any]] = []

    async def ask(http: aiohttp.ClientSession, agent: dict[str, Any]) -> None:
        nid = str(agent.get("node_id"))
        try:
            if nid == self_node_id:
                got = await node.node_stacks(nid, str(agent.get("node_ip")), job=job, run=run, native=native,
                                             use_pyspy=use_pyspy)
            else:
                url = await _blocking(agent_base_url, nid, nodes) + "/api/v1/node/stacks"
                q = _query(None, job, run, native, use_pyspy)
                async with http.get(url, params=q, headers={"Authorization": f"Bearer {token}"}) as resp:
                    body = await resp.json(content_type=None)
                    if resp.status != 200:
                        raise RuntimeError(str(body.get("error") if isinstance(body, dict) else body))
                    got = list(body["workers"])
            workers.extend(got)
        except Exception as exc:
            errors.append({"node_id": nid, "error": str(exc) or type(exc).__name__})

    live = [a for a in agents if a.get("port")]
    nodes = await _blocking(_ray_nodes) if any(a.get("node_id") != self_node_id for a in live) else []
    timeout = aiohttp.ClientTimeout(total=AGENT_TIMEOUT_S)
    async with aiohttp.ClientSession(timeout=timeout) as http:
        progress, _ = await asyncio.gather(_progress(token, self_node_id),
                                           asyncio.gather(*(ask(http, a) for a in live)))
    try:
        labels = worker_labels.train_labels(await asyncio.wait_for(asyncio.shield(train), TRAIN_WAIT_S))
    except asyncio.TimeoutError:
        labels = {}  # still importing Ray Train: this answer goes without its labels
    for w in workers:
        worker_labels.apply_labels(w, labels.get((str(w.get("node_id")), int(w.get("pid") or 0))))
    if run is not None:
        workers = [w for w in workers if run in (w.get("train_run"), w.get("train_run_id"))]
        if not workers:
            errors.append({"node_id": "", "error": f"no worker of a Ray Train run named {run}"})
    workers.sort(key=lambda w: (w.get("train_run") or "", w.get("world_rank") if w.get("world_rank") is not None
                                else 1 << 30, str(w.get("node_id")), int(w.get("pid") or 0)))
    for w in workers:
        if w.get("error"):
            errors.append({"node_id": str(w.get("node_id")), "pid": w.get("pid"), "error": w["error"]})
    dumped = [w for w in workers if w.get("threads")]
    return {
        "workers": workers,
        "classes": classes.group(dumped),
        "runs": classes.runs(workers, progress),
        "errors": errors,
        "took_s": round(time.monotonic() - start, 4),
    }
