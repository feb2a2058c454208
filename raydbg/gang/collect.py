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
from raydbg.gang import classes, identity, node

AGENT_TIMEOUT_S = 15.0


async def _blocking(fn: Callable[..., Any], *args: Any) -> Any:
    return await asyncio.get_running_loop().run_in_executor(None, partial(fn, *args))


def agent_base_url(agent: dict[str, Any]) -> str:
    """The one place that turns an agent record into an address to dial."""
    return f"http://{agent['node_ip']}:{int(agent['port'])}"


def _train_runs() -> list[dict[str, Any]]:
    from raydbg import _ray_internals

    try:
        return _ray_internals.train_runs()
    except Exception:
        return []  # no Train state (or it is slow to answer): stacks without Train labels


async def _progress(token: str, node_id: str) -> dict[Any, float]:
    try:
        from raydbg.gang import progress, train_api

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
    agents, runs = await asyncio.gather(_blocking(registry.agents), _blocking(_train_runs))
    if run is not None:
        runs = [r for r in runs if run in (r["name"], r["run_id"])]
    labels = identity.train_labels(runs)
    by_node: dict[str, dict[int, dict[str, Any]]] = {}
    for (nid, pid), lab in labels.items():
        by_node.setdefault(nid, {})[pid] = lab
    errors: list[dict[str, Any]] = []
    workers: list[dict[str, Any]] = []

    async def ask(http: aiohttp.ClientSession, agent: dict[str, Any]) -> None:
        nid = str(agent.get("node_id"))
        node_labels = by_node.get(nid, {})
        # With Train's state actor the run's pids are known here; without it each agent
        # knows its own ranks (progress records) and filters by run itself.
        pids = sorted(node_labels) if run is not None and runs else None
        agent_run = run if pids is None else None
        if pids == [] and not node_labels:
            return  # none of the run's ranks on this node
        try:
            if nid == self_node_id:
                got = await node.node_stacks(nid, str(agent.get("node_ip")), pids=None if pids is None else set(pids),
                                             job=job, run=agent_run, native=native, use_pyspy=use_pyspy,
                                             labels=node_labels)
            else:
                url = agent_base_url(agent) + "/api/v1/node/stacks"
                q = _query(pids, job, agent_run, native, use_pyspy)
                async with http.get(url, params=q, headers={"Authorization": f"Bearer {token}"}) as resp:
                    body = await resp.json(content_type=None)
                    if resp.status != 200:
                        raise RuntimeError(str(body.get("error") if isinstance(body, dict) else body))
                    got = list(body["workers"])
            for w in got:  # Train labels are the gateway's: applied here, not sent down
                identity.apply_labels(w, node_labels.get(int(w.get("pid") or 0)))
            workers.extend(got)
        except Exception as exc:
            errors.append({"node_id": nid, "error": str(exc) or type(exc).__name__})

    live = [a for a in agents if a.get("port")]
    timeout = aiohttp.ClientTimeout(total=AGENT_TIMEOUT_S)
    async with aiohttp.ClientSession(timeout=timeout) as http:
        progress, _ = await asyncio.gather(_progress(token, self_node_id),
                                           asyncio.gather(*(ask(http, a) for a in live)))
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
