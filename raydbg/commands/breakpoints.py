"""`raydbg break add FILE:LINE | list | rm ID|--all`: armed breakpoints through the gateway."""

from __future__ import annotations

import argparse
import os
import re
import sys
from typing import Any

from raydbg.breakpoints import model
from raydbg.commands.base import UserError, add_gateway_args, gateway_from_args, print_json

PY311_NOTE = ("note: {who} Python {versions}: arming there is opt-in (RAYDBG_BREAK_PY311=1 in the job's "
              "environment, e.g. runtime_env={{'env_vars': {{'RAYDBG_BREAK_PY311': '1'}}}}) and makes hot "
              f"code {model.PY311_COST} slower while anything is armed for the job (a settrace "
              "fallback, docs/breakpoints.md); Python 3.12+ arms at no measurable cost")
_VERSION = re.compile(r"\d{1,2}\.\d{1,3}(\.\d{1,3})?")


def _tuple(version: str) -> tuple[int, ...]:
    return tuple(int(x) for x in version.split("."))


def cluster_pythons(status: dict[str, Any]) -> list[str]:
    """The Python versions the node agents report (`python` in each agent record), sorted."""
    found = set()
    for agent in status.get("agents") or []:
        version = agent.get("python") if isinstance(agent, dict) else None
        if isinstance(version, str) and _VERSION.fullmatch(version):
            found.add(version)
    return sorted(found, key=_tuple)


def py311_note(status: dict[str, Any] | None) -> str | None:
    """The cost note when workers run Python < 3.12: the cluster's versions from the agents'
    records; without them (an older agent, or no status) this CLI's own version."""
    versions = cluster_pythons(status or {})
    who = "this cluster's workers run"
    if not versions:
        versions, who = [".".join(map(str, sys.version_info[:3]))], "workers' version unknown; this CLI runs"
    old = [v for v in versions if _tuple(v)[:2] < (3, 12)]
    return PY311_NOTE.format(who=who, versions=", ".join(old)) if old else None


def where(bp: dict[str, Any]) -> str:
    return f"{bp['file']}:{bp['line']}"


def describe(bp: dict[str, Any]) -> str:
    job = bp.get("job") or "every job"
    cond = f" if {bp['condition']}" if bp.get("condition") else ""
    return f"{bp['id']} {where(bp)} ({job}{cond}; at most {bp['hit_limit']} paused at once)"


def cmd_add(args: argparse.Namespace) -> int:
    import asyncio

    try:
        path, line = model.parse_spec(args.spec)
    except model.BadBreakpoint as exc:
        raise UserError(str(exc)) from None
    body = {"file": model.cli_path(path, os.getcwd()), "line": line, "job": args.job,
            "condition": args.condition, "hit_limit": args.hit_limit, "owner": "cli"}
    gw = gateway_from_args(args)
    bp = asyncio.run(gw.add_breakpoint(body))
    if args.json:
        print_json(bp)
    else:
        print(f"armed {describe(bp)}")
        if not os.path.isabs(bp["file"]):
            print(f"  (a relative path: it matches any worker file ending in /{bp['file']})")
    try:
        status: dict[str, Any] | None = asyncio.run(gw.status())
    except Exception:  # the breakpoint is armed: the note falls back to this CLI's version
        status = None
    note = py311_note(status)
    if note:
        print(note, file=sys.stderr)
    return 0


def cmd_list(args: argparse.Namespace) -> int:
    import asyncio

    bps = asyncio.run(gateway_from_args(args).breakpoints(args.job))
    if args.json:
        print_json(bps)
        return 0
    if not bps:
        print("no armed breakpoints")
        return 0
    from raydbg import table_layout

    rows = [(bp["id"], where(bp), bp.get("job") or "*", bp.get("condition") or "", str(bp["hits"]),
             f"{bp['paused']}/{bp['hit_limit']}", bp.get("owner", ""), bp.get("error") or "")
            for bp in bps]
    import shutil

    width = shutil.get_terminal_size().columns if sys.stdout.isatty() else None
    for line in table_layout.render(("id", "where", "job", "condition", "hits", "paused", "owner", "error"),
                                    rows, width, drop_order=("owner", "error", "condition", "job", "hits"),
                                    never_cut=("id",)):
        print(line)
    return 0


def cmd_rm(args: argparse.Namespace) -> int:
    import asyncio

    gw = gateway_from_args(args)
    if args.all == bool(args.id):
        raise UserError("give a breakpoint id or --all (see `raydbg break list`)")

    async def remove() -> list[str]:
        if not args.all:
            return [str((await gw.remove_breakpoint(args.id))["removed"])]
        bps = await gw.breakpoints(args.job)
        if args.job:  # --all --job J: that job's only, not those armed for every job
            bps = [bp for bp in bps if bp.get("job") == args.job]
        return [str((await gw.remove_breakpoint(bp["id"]))["removed"]) for bp in bps]

    removed = asyncio.run(remove())
    print(f"removed {len(removed)} breakpoint(s)" + (f": {' '.join(removed)}" if removed else ""))
    return 0


def register(sub: Any) -> None:
    p = sub.add_parser("break", help="breakpoints armed in every worker of a job, without code changes")
    verbs = p.add_subparsers(dest="verb", required=True)
    a = verbs.add_parser("add", help="arm FILE:LINE in every raydbg-activated worker (of --job, else all)")
    a.add_argument("spec", metavar="FILE:LINE")
    a.add_argument("--job", help="a Ray job id (as `raydbg list` shows); default: every job")
    a.add_argument("--condition", help="pause only when this Python expression is true in that frame")
    a.add_argument("--hit-limit", type=int, default=None,
                   help=f"threads paused there at once, cluster-wide (default {model.DEFAULT_HIT_LIMIT}); "
                        "later hits count and run on")
    a.add_argument("--json", action="store_true")
    add_gateway_args(a, json_flag=False)  # --json above: where it always stood in --help
    a.set_defaults(fn=cmd_add)
    ls = verbs.add_parser("list", help="armed breakpoints with their hits and paused threads")
    ls.add_argument("--job", help="that job's and those for every job")
    ls.add_argument("--json", action="store_true")
    add_gateway_args(ls, json_flag=False)
    ls.set_defaults(fn=cmd_list)
    r = verbs.add_parser("rm", help="disarm a breakpoint (or --all)")
    r.add_argument("id", nargs="?")
    r.add_argument("--all", action="store_true", help="every breakpoint (of --job, if given)")
    r.add_argument("--job")
    add_gateway_args(r, json_flag=False)
    r.set_defaults(fn=cmd_rm)
