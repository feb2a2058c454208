"""The gang feature's HTTP routes on every agent: stacks, progress, continue and pause groups; the gateway's hang detector.

  GET  /api/v1/node/stacks?pids=1,2&job=ID&run=NAME&native=0|1&pyspy=0|1&thread=0|1   this node's WorkerStacks and progress beats
  GET  /api/v1/stacks?job=ID&run=NAME&native=0|1&pyspy=0|1&thread=0|1                 the whole cluster, grouped (gateway)
       (thread=0: activated workers' stacks threads not asked, py-spy for every worker)
  POST /api/v1/node/pause              {"pid": N}: pause this node's worker N (raydbg pause; pause_service.py)
  POST /api/v1/pause                   {"target": T, "job": ID, "wait_s": S}: pause any worker (gateway)
  POST /api/v1/sessions/{id}/continue   resume one paused session (waiting or attached; a snapshot is dropped)
  POST /api/v1/groups/{group}/continue  resume every rank of a pause-all group
  POST /api/v1/continue                 {"job": ID} or {"all": true}: resume every paused session of the job (or all)
  GET  /api/v1/groups                   pause groups among the listed sessions
  GET  /api/v1/progress/local           this node's progress beats
  GET  /api/v1/progress                 every node's (gateway only)
  GET  /api/v1/steps?job=ID&run=NAME    per Train run, each rank's recent step times (gateway only)
  GET  /api/v1/train/runs               every Ray Train run with its attempts (gateway only)
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

from aiohttp import web

from raydbg import _ray_internals, progress_records, registry, validate
from raydbg.agent.server import AgentServer, json_body
from raydbg.api_errors import BadRequest, NotFound, Unavailable
from raydbg.gang import cluster_view, hang_service, node, pause, pause_service, stragglers
from raydbg.telemetry import attempts
from raydbg.worker import resume

TRAIN_STATE_TIMEOUT_S = 10.0  # its first lookup from the gateway imports Ray Train (seconds when loaded)


def _flag(request: web.Request, name: str, default: bool) -> bool:
    value = request.query.get(name)
    return default if value is None else value not in ("0", "false", "no", "")


def _pids(text: str | None) -> set[int] | None:
    if text is None:
        return None
    try:
        return {int(p) for p in text.split(",") if p.strip()}
    except ValueError:
        raise BadRequest("pids must be comma-separated integers") from None


BULK_BODY = '{"job": ID} or {"all": true}'


def bulk_scope(body: Any) -> str | None:
    """The job a bulk continue names (None: every job); BadRequest for any other body."""
    if not isinstance(body, dict) or ("job" in body) == bool(body.get("all")):
        raise BadRequest(f"send {BULK_BODY}")
    if body.get("all"):
        if body["all"] is not True:
            raise BadRequest('"all" must be true')
        return None
    job = body["job"]
    if not isinstance(job, str) or not validate.is_id(job):
        raise BadRequest(f"bad job id {job!r}: see `raydbg list` for the paused sessions' jobs")
    return job


def register(agent: AgentServer, app: web.Application) -> None:
    """The gang's routes on `agent`'s app; on the gateway, also the hang detector for the app's life."""
    app.add_routes(stack_routes(agent) + resume_and_progress_routes(agent) + pause_routes(agent))
    if agent.is_head:
        hang_service.attach(agent, app)


def stack_routes(agent: AgentServer) -> list[web.RouteDef]:
    """This node's stacks; the cluster's only on the gateway."""

    async def node_stacks(request: web.Request) -> web.Response:
        pids = _pids(request.query.get("pids"))
        workers = await node.node_stacks(
            agent.node_id, agent.node_ip, pids=pids, job=request.query.get("job") or None,
            run=request.query.get("run") or None,
            native=_flag(request, "native", False), use_pyspy=_flag(request, "pyspy", True),
            use_thread=_flag(request, "thread", True))
        beats = await asyncio.to_thread(progress_records.read_all)  # for the gateway's progress ages
        return web.json_response({"node_id": agent.node_id, "workers": workers, "progress": beats})

    async def cluster_stacks(request: web.Request) -> web.Response:
        answer = await cluster_view.cluster_stacks(
            job=request.query.get("job") or None, run=request.query.get("run") or None,
            native=_flag(request, "native", False), token=agent.token, self_node_id=agent.node_id,
            use_pyspy=_flag(request, "pyspy", True), use_thread=_flag(request, "thread", True))
        return web.json_response(answer)

    async def train_runs(request: web.Request) -> web.Response:
        try:
            records = await asyncio.to_thread(_ray_internals.train_run_records, None, TRAIN_STATE_TIMEOUT_S)
        except Exception as exc:  # the state actor did not answer: say so, the client goes on without
            raise Unavailable(f"Ray Train's state actor: {exc or type(exc).__name__}") from None
        return web.json_response({"runs": attempts.summarize(records)})

    out = [web.get("/api/v1/node/stacks", node_stacks)]
    if agent.is_head:
        out += [web.get("/api/v1/stacks", cluster_stacks), web.get("/api/v1/train/runs", train_runs)]
    return out


def pause_routes(agent: AgentServer) -> list[web.RouteDef]:
    async def node_pause(request: web.Request) -> web.Response:
        body = await json_body(request, '{"pid": N}')
        pid = body.get("pid") if isinstance(body, dict) else None
        if not validate.is_pid(pid):
            raise BadRequest(f'send {{"pid": N}}, N a process id (an integer from 1 to {validate.MAX_PID})')
        answer = await pause_service.pause_local(pid)
        return web.json_response({"node_id": agent.node_id, "pid": pid, **answer})

    async def cluster_pause(request: web.Request) -> web.Response:
        body = await json_body(request, pause_service.BODY)
        return web.json_response(await pause_service.pause(body, token=agent.token, node_id=agent.node_id))

    out = [web.post("/api/v1/node/pause", node_pause)]
    if agent.is_head:
        out.append(web.post("/api/v1/pause", cluster_pause))
    return out


def resume_and_progress_routes(agent: AgentServer) -> list[web.RouteDef]:
    async def continue_session(request: web.Request) -> web.Response:
        sid = request.match_info["id"]
        rec = await asyncio.to_thread(registry.get, registry.SESSION + sid)
        if rec is None:
            raise NotFound(f"no paused session {sid}")
        await asyncio.to_thread(resume.request_session, sid)
        return web.json_response({"continued": [sid], "group": None})

    async def continue_group(request: web.Request) -> web.Response:
        gid = request.match_info["group"]
        sessions = await asyncio.to_thread(registry.sessions)
        kind, ids = pause.resolve(gid, sessions)
        if kind != "group":
            raise NotFound(f"no paused session in group {gid}")
        await asyncio.to_thread(resume.request_group, gid)
        return web.json_response({"continued": ids, "group": gid})

    async def continue_many(request: web.Request) -> web.Response:
        job = bulk_scope(await json_body(request, BULK_BODY))
        sessions = await asyncio.to_thread(registry.sessions)
        ids, gids = pause.bulk_targets(sessions, job)
        if not ids:
            where = f"of job {job}" if job is not None else "on the cluster"
            raise NotFound(f"no paused session {where}: see `raydbg list`")

        def write() -> None:
            # The same requests one `raydbg continue` each would write; a group's key also lets
            # a rank that reaches the line after this go on, as `continue GROUP` does.
            for gid in gids:
                resume.request_group(gid)
            for sid in ids:
                resume.request_session(sid)

        await asyncio.to_thread(write)
        return web.json_response({"continued": ids, "groups": gids, "job": job})

    async def groups(request: web.Request) -> web.Response:
        return web.json_response(pause.groups(await asyncio.to_thread(registry.sessions)))

    async def progress_local(request: web.Request) -> web.Response:
        return web.json_response(await asyncio.to_thread(progress_records.read_all))

    async def progress_all(request: web.Request) -> web.Response:
        if not agent.is_head:
            raise NotFound("not the gateway")
        beats, errors = await cluster_view.merged_progress(agent.token, agent.node_id)
        return web.json_response({"progress": beats, "errors": errors})

    async def steps(request: web.Request) -> web.Response:
        if not agent.is_head:
            raise NotFound("not the gateway")
        beats, errors = await cluster_view.merged_progress(agent.token, agent.node_id)
        runs = stragglers.steps_view(beats, time.time(), job=request.query.get("job") or None,
                                     run=request.query.get("run") or None,
                                     named=hang_service.open_stragglers(request.app))
        return web.json_response({"runs": runs, "errors": errors})

    return [
        web.post("/api/v1/sessions/{id}/continue", continue_session),
        web.post("/api/v1/groups/{group}/continue", continue_group),
        web.post("/api/v1/continue", continue_many),
        web.get("/api/v1/groups", groups),
        web.get("/api/v1/progress/local", progress_local),
        web.get("/api/v1/progress", progress_all),
        web.get("/api/v1/steps", steps),
    ]
