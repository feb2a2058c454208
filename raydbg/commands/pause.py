"""`raydbg pause TARGET`: stop a running worker's work thread at its next line, as a debug session.

TARGET: a Train rank `RUN:RANK`, a worker pid (or `NODE:PID`), or a stack class id from
`raydbg stacks --json`. A thread blocked in C is listed at once as a snapshot (its frames
with their locals) and becomes the session when it returns to Python.
"""

from __future__ import annotations

import argparse
import os
from typing import Any

from raydbg.commands.base import add_gateway_args, gateway_from_args, print_json

MAX_LOCALS_SHOWN = 12


def render(answer: dict[str, Any]) -> str:
    who = f"pid {answer['pid']} on node {str(answer['node_id'])[:12]}"
    if answer.get("world_rank") is not None:
        who = f"rank {answer['world_rank']} of {answer.get('train_run')} ({who})"
    rec = answer.get("session")
    if rec is None:
        return (f"raydbg pause: {who}: thread {answer.get('thread')} asked to stop; not listed yet "
                f"(see `raydbg list`)")
    where = f"{os.path.basename(str(rec['file']))}:{rec['line']} in {rec['function']}"
    if rec.get("state") != "snapshot":
        return (f"raydbg pause: {who}: session {rec['id']} at {where} (thread {rec['thread_name']}); "
                f"`raydbg attach {rec['id']}`, `raydbg continue {rec['id']}`")
    lines = [f"raydbg pause: {who}: thread {rec['thread_name']} is blocked in C at {where}; snapshot "
             f"{rec['id']} listed, it becomes a session when the thread returns to Python",
             "(`raydbg continue " + rec["id"] + "` lets it run on without stopping)"]
    for frame in rec.get("frames") or []:
        lines.append(f"  {frame['function']}  {frame['file']}:{frame['line']}")
        local = list((frame.get("locals") or {}).items())
        for name, value in local[:MAX_LOCALS_SHOWN]:
            lines.append(f"      {name} = {value}")
        if len(local) > MAX_LOCALS_SHOWN:
            lines.append(f"      ... {len(local) - MAX_LOCALS_SHOWN} more (--json)")
    return "\n".join(lines)


def cmd_pause(args: argparse.Namespace) -> int:
    import asyncio

    answer = asyncio.run(gateway_from_args(args).pause(args.target, args.job, args.wait))
    if args.json:
        print_json(answer)
    else:
        print(render(answer))
    return 0


def register(sub: Any) -> None:
    p = sub.add_parser("pause", help="stop a running worker (RUN:RANK, PID or a stack class) as a debug session")
    p.add_argument("target", help="RUN:RANK (a Train rank), PID or NODE:PID, or a class id from "
                                  "`raydbg stacks --json`")
    p.add_argument("--job", help="only workers of this Ray job (hex id)")
    p.add_argument("--wait", type=float, default=5.0, metavar="S",
                   help="seconds to wait for the session to be listed (default 5)")
    add_gateway_args(p)
    p.set_defaults(fn=cmd_pause)
