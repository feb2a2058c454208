"""`raydbg stacks`: every worker's stacks, cluster-wide, grouped into classes (report or --json)."""

from __future__ import annotations

import argparse
from typing import Any

from raydbg.commands.base import UserError, add_gateway_args, gateway_from_args, print_json


def cmd_stacks(args: argparse.Namespace) -> int:
    import asyncio

    from raydbg.gang.report import render

    if args.pyspy and args.no_pyspy:
        raise UserError("--pyspy and --no-pyspy contradict each other: pick one")
    gw = gateway_from_args(args)
    try:
        answer = asyncio.run(gw.stacks(args.job, args.run, args.native, not args.no_pyspy, timeout=args.timeout,
                                       thread=not args.pyspy))
    except ValueError:  # not JSON: a gateway without this route answers 404 in text
        raise UserError(f"the gateway at {gw.address} has no stacks endpoint: restart it with this "
                        "raydbg (`raydbg down && raydbg up`)") from None
    if args.json:
        print_json(answer)
    else:
        print(render(answer, all_threads=args.all_threads))
    return 0


def register(sub: Any) -> None:
    p = sub.add_parser("stacks", help="Python stacks of every Ray worker, grouped; odd ones first")
    p.add_argument("--job", help="only this Ray job (hex id)")
    p.add_argument("--run", help="only this Ray Train run (name or id)")
    p.add_argument("--native", action="store_true", help="include native (C/C++) frames (py-spy --native)")
    p.add_argument("--all-threads", action="store_true", help="also print every thread of every worker")
    p.add_argument("--no-pyspy", action="store_true",
                   help="only raydbg's cooperative ways (no ptrace stop of the workers)")
    p.add_argument("--pyspy", action="store_true",
                   help="py-spy for every worker, raydbg-activated ones too (their stacks threads not asked)")
    p.add_argument("--timeout", type=float, default=30.0, help="seconds to wait for the gateway")
    add_gateway_args(p)
    p.set_defaults(fn=cmd_stacks)
