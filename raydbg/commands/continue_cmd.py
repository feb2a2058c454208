"""`raydbg continue SESSION_OR_GROUP`: resume one paused session, or every rank of a pause group.

(A module cannot be called `continue`: a Python keyword.)
"""

from __future__ import annotations

import argparse
import asyncio
from typing import Any

from raydbg.client import Gateway, GatewayError
from raydbg.commands.base import add_gateway_args, gateway_from_args, print_json
from raydbg.gang import pause


async def continue_target(gw: Gateway, target: str) -> dict[str, Any]:
    """Resume a pause group (every rank in it) or one session; GatewayError when neither is listed."""
    kind, _ = pause.resolve(target, await gw.sessions())
    if kind == "group":
        return await gw.continue_group(target)
    if kind == "session":
        return await gw.continue_session(target)
    raise GatewayError(f"no paused session or pause group {target}: see `raydbg list`")


def cmd_continue(args: argparse.Namespace) -> int:
    out = asyncio.run(continue_target(gateway_from_args(args), args.target))
    if args.json:
        print_json(out)
    elif out.get("group"):
        print(f"raydbg continue: group {out['group']}: {len(out['continued'])} session(s) resume")
    else:
        print(f"raydbg continue: session {out['continued'][0]} resumes")
    return 0


def register(sub: Any) -> None:
    p = sub.add_parser("continue", help="resume a paused session, or every rank of a pause group")
    p.add_argument("target", help="a session id or a pause group id (from `raydbg list`)")
    add_gateway_args(p)
    p.set_defaults(fn=cmd_continue)
