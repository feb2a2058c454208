"""`raydbg pause` in the agents: the node's part (ask the worker) and the gateway's (find it, wait for its session).

  POST /api/v1/node/pause  {"pid": N}                      every agent: its own node's worker
  POST /api/v1/pause       {"target": T, "job": ID, "wait_s": S}   the gateway: any node's

A worker is paused only if it runs as this agent's user and is raydbg-activated (it has a
stacks thread, which takes the request: cooperative_worker.py, on_demand.py). The gateway answers
once the worker's session (or its snapshot, for a thread blocked in C) is listed, or after
`wait_s` with `session: null`.
"""

from __future__ import annotations

import asyncio
import os
import pwd
import time
from typing import Any

import msgspec
import psutil

from raydbg import dial, registry
from raydbg.api_errors import BadRequest, Conflict, Forbidden, NotFound
from raydbg.gang import cluster_view, cooperative_agent, pause_target
from raydbg.gang.pyspy import StackError
from raydbg.schema import PauseAnswer

DEFAULT_WAIT_S = 5.0
MAX_WAIT_S = 60.0
NODE_TIMEOUT_S = 10.0  # the worker's answer: its first pause loads debugpy's tracing helper
POLL_S = 0.05


BODY = '{"target": "RUN:RANK" | "PID" | "NODE:PID" | "CLASS_ID"}'


def _user(uid: int) -> str:
    try:
        return pwd.getpwuid(uid).pw_name
    except KeyError:
        return f"uid {uid}"


async def pause_local(pid: int) -> dict[str, Any]:
    """Ask this node's worker `pid` to pause; its answer ({"thread": name})."""
    try:
        owner = psutil.Process(pid).uids().real
    except psutil.NoSuchProcess:
        raise NotFound(f"no process {pid} on this node") from None
    if owner != os.getuid():
        raise Forbidden(f"pid {pid} runs as {_user(owner)}: raydbg pauses only its own "
                                f"user's workers ({_user(os.getuid())})")
    if not cooperative_agent.listening(pid):
        raise Conflict(f"pid {pid} is not a raydbg-activated worker (no stacks thread): "
                                f"run the job with RAY_DEBUG=1")
    try:
        answer = await cooperative_agent.ask_pause(pid, NODE_TIMEOUT_S)
    except StackError as exc:
        raise Conflict(str(exc)) from None
    if answer.get("error"):
        raise Conflict(f"pid {pid}: {answer['error']}")
    return answer


async def _find(target: pause_target.Target, job: str | None, token: str,
                node_id: str) -> pause_target.Worker:
    """Ranks and pids from the progress beats (cheap); a class, or a pid that never beat,
    from the stacks report."""
    if target.kind != "class":
        beats, _ = await cluster_view.merged_progress(token, node_id)
        found = pause_target.from_beats(target, [b for b in beats if not job or b.get("job_id") == job])
        if found is not None:
            return found
    report = await cluster_view.cluster_stacks(job=job, token=token, self_node_id=node_id, use_pyspy=False)
    found = pause_target.from_stacks(target, report)
    if found is None:
        raise NotFound(pause_target.not_found(target))
    return found


async def _listed(worker: pause_target.Worker, since: float, wait_s: float) -> dict[str, Any] | None:
    """The session (or snapshot) `raydbg pause` made in `worker`, once listed."""
    deadline = time.monotonic() + wait_s
    while True:
        for rec in await asyncio.to_thread(registry.sessions):
            if (rec.get("pid") == worker.pid and rec.get("node_id") == worker.node_id
                    and rec.get("reason") == "pause" and float(rec.get("since") or 0) >= since):
                return rec
        if time.monotonic() >= deadline:
            return None
        await asyncio.sleep(POLL_S)


async def pause(body: Any, *, token: str, node_id: str) -> dict[str, Any]:
    """The gateway's pause: find the worker, ask its node, wait for the session."""
    if not isinstance(body, dict) or not isinstance(body.get("target"), str):
        raise BadRequest(f"send {BODY}")
    try:
        target = pause_target.parse(body["target"])
    except pause_target.BadTarget as exc:
        raise BadRequest(str(exc)) from None
    try:
        wait_s = min(MAX_WAIT_S, max(0.0, float(body.get("wait_s", DEFAULT_WAIT_S))))
    except (TypeError, ValueError, OverflowError):  # a list, a text, 10**400
        raise BadRequest(f"wait_s must be a number of seconds (at most {MAX_WAIT_S:g} are waited)") from None
    job = body.get("job") if isinstance(body.get("job"), str) else None
    started = time.time()
    try:
        worker = await _find(target, job, token, node_id)
    except pause_target.BadTarget as exc:
        raise Conflict(str(exc)) from None
    if worker.node_id == node_id:
        answer = await pause_local(worker.pid)
    else:
        # The node's refusal (404, 403, 409) is answered on as it is, with its line.
        answer = await dial.post_agent(worker.node_id, "/api/v1/node/pause", {"pid": worker.pid},
                                       token=token, timeout_s=NODE_TIMEOUT_S + 5)
    # `since` of a record is the worker's clock: a second's skew between nodes still matches.
    session = await _listed(worker, started - 1.0, wait_s)
    out: dict[str, Any] = msgspec.to_builtins(PauseAnswer(
        target=body["target"], node_id=worker.node_id, pid=worker.pid, train_run=worker.train_run,
        world_rank=worker.world_rank, thread=answer.get("thread"), session=session))
    return out
