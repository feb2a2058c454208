"""CLI for Train gangs: `raydbg continue SESSION_OR_GROUP`, and the held ranks of `raydbg list`."""

from __future__ import annotations

import argparse
import asyncio
from typing import Any

from raydbg.client import Gateway, GatewayError
from raydbg.gang import pause
from raydbg.gang.ranks import held_by_session


async def continue_target(gw: Gateway, target: str) -> dict[str, Any]:
    """Resume a pause group (every rank in it) or one session; GatewayError when neither is listed."""
    kind, _ = pause.resolve(target, await gw.sessions())
    if kind == "group":
        return await gw.continue_group(target)
    if kind == "session":
        return await gw.continue_session(target)
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
async def with_held(gw: Gateway, recs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Add `held` (ranks held by this paused rank) to Train sessions; asks for stacks only if any."""
    runs = sorted({(str(r.get("job_id") or ""), str(r["train_run"])) for r in recs if r.get("train_run")})
    for job_id, run in runs:
        try:
            stacks = await gw.stacks(job_id, run, timeout=30)
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
