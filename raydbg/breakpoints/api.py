"""The gateway's breakpoint routes (token-checked by the agent's middleware like every /api/v1 route).

  GET    /api/v1/breakpoints[?job=J]            {"breakpoints": [...]}: J's and every job's
  POST   /api/v1/breakpoints                    one Breakpoint from {"file", "line", "job"?, "condition"?,
                                                "hit_limit"?, "owner"?}; bad input: 400 {"error"}
  DELETE /api/v1/breakpoints/{id}               {"removed": id}; unknown: 404
  PUT    /api/v1/breakpoints?owner=O[&job=J]    {"breakpoints": [...]} replaces all of (O, J) at once
"""

from __future__ import annotations

import asyncio
from typing import Any

from aiohttp import web

from raydbg import validate
from raydbg.agent.server import AgentServer, json_body
from raydbg.api_errors import NotFound
from raydbg.breakpoints import model, store

MAX_PUT = 1000


def _job(request: web.Request) -> str | None:
    job = request.query.get("job") or None
    if job is not None and not validate.is_id(job):
        raise model.BadBreakpoint("job must be an id (letters, digits, '_', '.', '-')")
    return job


def _listed(bps: list[model.Breakpoint]) -> dict[str, Any]:
    return {"breakpoints": store.listing(bps)}


def register(agent: AgentServer, app: web.Application) -> None:
    """The breakpoint routes on the gateway's app (every agent serves them; clients use the gateway).
    Bad input is a model.BadBreakpoint: the agent's error middleware answers it with a one-line 400."""

    async def list_all(request: web.Request) -> web.Response:
        job = _job(request)

        def read() -> dict[str, Any]:
            return _listed([bp for bp in store.load() if model.in_scope(bp, job)])

        return web.json_response(await asyncio.to_thread(read))

    async def add(request: web.Request) -> web.Response:
        body = await json_body(request, 'a breakpoint {"file": PATH, "line": N, ...}')
        bp = model.checked(body, owner=body.get("owner") if isinstance(body, dict) else None,
                           job=body.get("job") if isinstance(body, dict) else None)
        await asyncio.to_thread(store.add, bp)
        return web.json_response(model.public(bp))

    async def remove(request: web.Request) -> web.Response:
        bp_id = request.match_info["id"]
        if not validate.is_id(bp_id) or not await asyncio.to_thread(store.remove, bp_id):
            raise NotFound(f"no breakpoint {validate.escape(bp_id, 64)}")
        return web.json_response({"removed": bp_id})

    async def replace(request: web.Request) -> web.Response:
        owner = model.ident(request.query.get("owner"), "owner")
        if owner is None:
            raise model.BadBreakpoint("PUT needs ?owner=NAME (whose breakpoints it replaces)")
        job = _job(request)
        body = await json_body(request, '{"breakpoints": [...]}')
        items = body.get("breakpoints") if isinstance(body, dict) else None
        if not isinstance(items, list) or len(items) > MAX_PUT:
            raise model.BadBreakpoint(f'the body must be {{"breakpoints": [...]}} with at most {MAX_PUT}')
        wanted = [model.checked(item, owner=owner, job=job) for item in items]

        def write() -> dict[str, Any]:
            return _listed(store.replace(owner, job, wanted))

        return web.json_response(await asyncio.to_thread(write))

    app.add_routes([
        web.get("/api/v1/breakpoints", list_all),
        web.post("/api/v1/breakpoints", add),
        web.put("/api/v1/breakpoints", replace),
        web.delete("/api/v1/breakpoints/{id}", remove),
    ])
