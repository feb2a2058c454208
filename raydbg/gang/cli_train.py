"""CLI for Train gangs: `raydbg continue SESSION_OR_GROUP`, and the held ranks and pause groups of `raydbg list`."""

from __future__ import annotations

import argparse
import asyncio
import os
from typing import Any
from urllib.parse import urlencode

from raydbg.client import Gateway, GatewayError
from raydbg.gang import pause


async def continue_target(gw: Gateway, target: str) -> dict[str, Any]:
    """Resume a pause group (every rank in it) or one session; GatewayError when neither is listed."""
    kind, _ = pause.resolve(target, await gw.sessions())
    if kind == "group":
        return dict(await gw.post(f"/api/v1/groups/{target}/continue"))
    if kind == "session":
        return dict(await gw.post(f"/api/v1/sessions/{target}/continue"))
    raise GatewayError(f"no paused session or pause group {target}: see `raydbg list`")


def cmd_continue(args: argparse.Namespace) -> int:
    from raydbg.commands.base import gateway_from_args, print_json

    out = asyncio.run(continue_target(gateway_from_args(args), args.target))
    if args.json:
        print_json(out)
    elif out.get("group"):
        print(f"raydbg continue: group {out['group']}: {len(out['continued'])} session(s) resume")
    else:
        print(f"raydbg continue: session {out['continued'][0]} resumes")
    return 0


def register(sub: Any) -> None:
    from raydbg.commands.base import add_gateway_args

    p = sub.add_parser("continue", help="resume a paused session, or every rank of a pause group")
    p.add_argument("target", help="a session id or a pause group id (from `raydbg list`)")
    add_gateway_args(p)
    p.set_defaults(fn=cmd_continue)


# --- held ranks -------------------------------------------------------------------------
def held_by_session(recs: list[dict[str, Any]], stacks: dict[str, Any]) -> dict[str, list[dict[str, Any]]]:
    """For each paused Train session: the other ranks of its run that are held, with their class (pure)."""
    classes = {c.get("id"): c for c in stacks.get("classes") or []}
    out: dict[str, list[dict[str, Any]]] = {}
    for run in stacks.get("runs") or []:
        held = [
            {"world_rank": r.get("world_rank"), "state": r.get("state"), "class_id": r.get("class_id"),
             "summary": (classes.get(r.get("class_id")) or {}).get("summary", ""),
             "in_collective": r.get("world_rank") in (run.get("waiting") or []),
             "last_progress_s": r.get("last_progress_s"), "node_id": r.get("node_id"), "pid": r.get("pid")}
            for r in run.get("ranks") or [] if r.get("state") != "paused"
        ]
        for rec in recs:
            if rec.get("train_run") == run.get("run") and rec.get("job_id") == run.get("job_id"):
                out[str(rec["id"])] = held
    return out


async def with_held(gw: Gateway, recs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Add `held` (ranks held by this paused rank) to Train sessions; asks for stacks only if any."""
    runs = sorted({(str(r.get("job_id") or ""), str(r["train_run"])) for r in recs if r.get("train_run")})
    for job_id, run in runs:
        try:
            stacks = await gw.get("/api/v1/stacks?" + urlencode({"job": job_id, "run": run}), timeout=30)
        except GatewayError as exc:
            for rec in recs:
                if rec.get("train_run") == run:
                    rec["held_error"] = str(exc)
            continue
        for sid, held in held_by_session(recs, stacks).items():
            for rec in recs:
                if rec["id"] == sid:
                    rec["held"] = held
    return recs


def ranks_text(ranks: list[int]) -> str:
    try:
        from raydbg.gang.classes import rank_ranges

        return rank_ranges(ranks)
    except ImportError:
        return ",".join(str(r) for r in sorted(ranks))


def held_lines(recs: list[dict[str, Any]]) -> list[str]:
    """Text under the table: pause groups, then what each paused rank holds, one class a line."""
    lines = []
    for g in pause.groups(recs):
        ranks = [r for r in g["ranks"] if r is not None]
        size = g.get("world_size") or "?"
        lines.append(f"group {g['group']}: ranks {ranks_text(ranks)} ({len(ranks)}/{size}) of run {g['train_run']} "
                     f"at {os.path.basename(str(g['file']))}:{g['line']}  (raydbg continue {g['group']})")
    shown: set[tuple[Any, ...]] = set()
    for rec in recs:
        held = rec.get("held") or []
        if not held:
            if rec.get("held_error") and ("err", rec.get("train_run")) not in shown:
                shown.add(("err", rec.get("train_run")))
                lines.append(f"run {rec.get('train_run')}: held ranks unknown ({rec['held_error']})")
            continue
        key = (rec.get("job_id"), rec.get("train_run"), tuple(h["world_rank"] for h in held))
        if key in shown:
            continue
        shown.add(key)
        by_class: dict[Any, list[dict[str, Any]]] = {}
        for h in held:
            by_class.setdefault(h.get("class_id"), []).append(h)
        who = "rank " + str(rec.get("train_rank")) if rec.get("group") is None else f"group {rec['group']}"
        for members in by_class.values():
            ranks = [int(h["world_rank"]) for h in members]
            lines.append(f"  held by {who} of run {rec.get('train_run')}: ranks {ranks_text(ranks)}: "
                         f"{members[0].get('summary') or members[0].get('state')}")
    return lines
