"""`raydbg tui` and `raydbg attach ID`: argument parsing and start-up (Textual imported late)."""

from __future__ import annotations

import argparse
from typing import Any

from raydbg.commands.base import add_gateway_args, gateway_from_args


def _run(args: argparse.Namespace, attach: str | None) -> int:
    from raydbg.tui.app import create_app
    from raydbg.tui.gateway import HttpGateway

    # Discovery errors (no cluster, no token) are GatewayError: the CLI prints one line.
    found = gateway_from_args(args)
    if attach:
        import asyncio

        from raydbg.session_ids import resolve_session

        attach = asyncio.run(resolve_session(found, attach))  # any unique prefix of the id
    gateway = HttpGateway(found.address, found.token)
    app = create_app(gateway, attach=attach, refresh=args.refresh)
    app.run()
    return int(app.return_code or 0)


def cmd_tui(args: argparse.Namespace) -> int:
    if args.history is not None:
        return _run_history(args)
    return _run(args, None)


def _run_history(args: argparse.Namespace) -> int:
    """The TUI over a job's record (read-only, no cluster): `--history PATH|URI [--record NAME]`."""
    from raydbg.commands.base import UserError
    from raydbg.history import reader, store, view
    from raydbg.tui.app import create_app
    from raydbg.tui.history_gateway import HistoryGateway

    try:
        place = store.open_store(args.history or None)
        name = args.record or next(iter(reader.jobs(place)), {}).get("record")
        if not name:
            raise UserError(f"no job records in {place.where}")
        shown = view.build(reader.load(place, reader.resolve(place, name)))
    except OSError as exc:
        raise UserError(str(exc).removeprefix("raydbg: ")) from None
    app = create_app(HistoryGateway(shown), refresh=args.refresh)
    app.run()
    return int(app.return_code or 0)


def cmd_attach(args: argparse.Namespace) -> int:
    return _run(args, args.session_id)


def register(sub: Any) -> None:
    """Add `tui` and `attach` to the `raydbg` subcommand parser."""

    def common(p: argparse.ArgumentParser) -> None:
        add_gateway_args(p, json_flag=False)
        p.add_argument(
            "--refresh", type=float, default=1.0, help="seconds between session list refreshes"
        )

    p = sub.add_parser("tui", help="terminal UI: cluster, paused sessions, events, debugger")
    common(p)
    p.add_argument("--history", nargs="?", const="", metavar="PATH|URI",
                   help="show a job's record instead (read-only, no cluster; default place: RAYDBG_HISTORY, "
                        "else ~/.raydbg/history)")
    p.add_argument("--record", metavar="JOB|RUN", help="with --history: which job (default: the newest)")
    p.set_defaults(fn=cmd_tui)
    p = sub.add_parser("attach", help="open the terminal debugger on one paused session")
    p.add_argument("session_id", help="session id or any unique prefix of it (see `raydbg list`)")
    common(p)
    p.set_defaults(fn=cmd_attach)
