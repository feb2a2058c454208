"""`raydbg continue SESSION_OR_GROUP`: resume one paused session, or every rank of a pause group;
`raydbg continue --job ID` / `--all`: every paused session of a job, or of the cluster, in one request.

(A module cannot be called `continue`: a Python keyword.)
"""

from __future__ import annotations

import argparse
import re
from typing import TYPE_CHECKING, Any

from raydbg.commands.base import UserError, add_gateway_args

if TYPE_CHECKING:
    from raydbg.client import Gateway

# Ray's job ids are hex (`raydbg list` shows them: 01000000); the gateway checks again.
_JOB_ID = re.compile(r"[0-9a-fA-F]{1,64}")


async def continue_target(gw: Gateway, target: str) -> dict[str, Any]:
    """Resume a pause group (every rank in it) or one session; GatewayError when neither is listed."""
    from raydbg.client import GatewayError
    from raydbg.gang import pause

    kind, _ = pause.resolve(target, await gw.sessions())
    if kind == "group":
        return await gw.continue_group(target)
    if kind == "session":
        return await gw.continue_session(target)
    raise GatewayError(f"no paused session or pause group {target}: see `raydbg list`")


def _checked_job(job: str) -> str:
    job = job.strip()
    if not _JOB_ID.fullmatch(job):
        raise UserError(f"bad job id {job!r}: a Ray job id is hex digits, e.g. 01000000 (see `raydbg list`)")
    return job


def cmd_continue(args: argparse.Namespace) -> int:
    import asyncio

    from raydbg.commands.base import gateway_from_args, print_json

    job = _checked_job(args.job) if args.job is not None else None
    gw = gateway_from_args(args)
    if args.target is None:
        out = asyncio.run(gw.continue_all(job))
    else:
        out = asyncio.run(continue_target(gw, args.target))
    if args.json:
        print_json(out)
    elif args.target is None:
        scope = f"job {job}" if job is not None else "all jobs"
        print(f"raydbg continue: {scope}: {len(out['continued'])} session(s) resume")
    elif out.get("group"):
        print(f"raydbg continue: group {out['group']}: {len(out['continued'])} session(s) resume")
    else:
        print(f"raydbg continue: session {out['continued'][0]} resumes")
    return 0


def register(sub: Any) -> None:
    p = sub.add_parser("continue", help="resume a paused session, every rank of a pause group, "
                                        "or every paused session of a job (--job) or of all (--all)")
    # One of the three, never two: argparse's one-line usage error (exit 2) otherwise.
    scope = p.add_mutually_exclusive_group(required=True)
    scope.add_argument("target", nargs="?", help="a session id or a pause group id (from `raydbg list`)")
    scope.add_argument("--job", metavar="ID", help="resume every paused session of this job, in one request")
    scope.add_argument("--all", action="store_true", help="resume every paused session of every job")
    add_gateway_args(p)
    p.set_defaults(fn=cmd_continue)
