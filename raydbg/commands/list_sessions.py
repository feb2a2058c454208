"""`raydbg list`: the paused debug sessions, cluster-wide, with the ranks a paused Train rank holds."""

from __future__ import annotations

import argparse
import os
import sys
from typing import TYPE_CHECKING, Any

from raydbg.client import GatewayError
from raydbg.commands.base import add_gateway_args, gateway_from_args, print_json

if TYPE_CHECKING:
    from raydbg.client import Gateway

LIST_COLUMNS = ("id", "job", "what", "node", "pid", "where", "function", "reason", "paused", "attached")
# Least useful first: what a narrow terminal gives up (id, what and where stay; the id is never cut).
LIST_DROP_ORDER = ("function", "job", "attached", "pid", "node", "paused", "reason")


def _list_row(rec: dict[str, Any], now: float) -> tuple[str, ...]:
    from raydbg import records

    return (
        rec["id"],
        rec.get("job_id", ""),
        records.label(rec),
        (rec.get("node_ip") or rec.get("node_id", "")[:12]),
        str(rec.get("pid")),
        f"{os.path.basename(rec.get('file', ''))}:{rec.get('line')}",
        rec.get("function", ""),
        records.reason_text(rec),
        records.paused_for(rec, now),
        "yes" if rec.get("state") == "attached" else ("starting" if rec.get("state") == "starting" else "no"),
    )


async def with_held(gw: Gateway, recs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Add `held` (ranks held by this paused rank) to Train sessions; asks for stacks only if any."""
    from raydbg.gang.ranks import held_by_session

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


def cmd_list(args: argparse.Namespace) -> int:
    from raydbg.gang.ranks import held_lines

    gw = gateway_from_args(args)
    recs = gw.sessions_now()  # one call, no event loop: the common case imports no asyncio
    if any(r.get("train_run") for r in recs):
        import asyncio

        # Ranks held by a paused Train rank (the gateway's stacks, asked only for Train sessions).
        recs = asyncio.run(with_held(gw, recs))
    if args.json:
        print_json(recs)
        return 0
    if not recs:
        print("no paused sessions")
        return 0
    import shutil
    import time

    from raydbg import table_layout

    now = time.time()
    # A pipe gets whole values; a terminal drops the least useful columns before cutting any.
    width = shutil.get_terminal_size().columns if sys.stdout.isatty() else None
    for line in table_layout.render(LIST_COLUMNS, [_list_row(rec, now) for rec in recs], width,
                                    drop_order=LIST_DROP_ORDER, never_cut=("id",)):
        print(line)
    for line in held_lines(recs):
        print(line)
    return 0


def register(sub: Any) -> None:
    p = sub.add_parser("list", help="paused debug sessions, cluster-wide")
    add_gateway_args(p)
    p.set_defaults(fn=cmd_list)
