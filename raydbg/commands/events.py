"""`raydbg events`: memory-monitor kills, session, hang and straggler events (oldest first; --follow)."""

from __future__ import annotations

import argparse
from typing import Any

from raydbg.commands.base import add_gateway_args, gateway_from_args, print_json


def _print_event(ev: dict[str, Any], as_json: bool) -> None:
    import json
    import time

    if as_json:
        print(json.dumps(ev, sort_keys=True), flush=True)
        return
    when = time.strftime("%H:%M:%S", time.localtime(ev.get("ts", 0)))
    print(f"{when}  {ev.get('kind', '?'):<18} {ev.get('message', '')}", flush=True)


def cmd_events(args: argparse.Namespace) -> int:
    import asyncio
    import time

    gw = gateway_from_args(args)
    events = asyncio.run(gw.events(args.limit))
    if not args.follow:
        if args.json:
            print_json(events)
        elif not events:
            print("no events")
        for ev in [] if args.json else reversed(events):
            _print_event(ev, False)
        return 0
    # --follow: oldest first, then new ones as they come (one JSON object per line with --json).
    seen = {ev["id"] for ev in events}
    for ev in reversed(events):
        _print_event(ev, args.json)
    while True:
        time.sleep(1.0)
        for ev in reversed(asyncio.run(gw.events(args.limit))):
            if ev["id"] not in seen:
                seen.add(ev["id"])
                _print_event(ev, args.json)


def register(sub: Any) -> None:
    p = sub.add_parser("events", help="memory-monitor kills and session events (oldest first)")
    p.add_argument("--limit", type=int, default=50)
    p.add_argument("--follow", action="store_true", help="keep printing new events")
    add_gateway_args(p)
    p.set_defaults(fn=cmd_events)
