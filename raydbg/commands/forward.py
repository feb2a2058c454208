"""`raydbg forward`: a local port (or unix socket) a DAP client attaches to, relayed to a paused session."""

from __future__ import annotations

import argparse
import os
from typing import Any

from raydbg.commands.base import add_gateway_args, gateway_from_args


def cmd_forward(args: argparse.Namespace) -> int:
    import asyncio
    from pathlib import Path

    from raydbg.forward import Forwarder, default_unix_path
    from raydbg.session_ids import resolve_session

    async def serve() -> None:
        gw = gateway_from_args(args)
        sid = await resolve_session(gw, args.session_id)  # any unique prefix of the id
        unix = None if args.unix is None else Path(args.unix) if args.unix else default_unix_path(sid)
        fwd = Forwarder(gw, sid, args.port, unix_path=unix)
        port = await fwd.start()
        if unix is not None:
            print(f"raydbg forward: session {sid} on unix socket {unix} "
                  f"(DAP clients of uid {os.getuid()}: connect to this socket; Ctrl-C to stop)", flush=True)
        else:
            print(f"raydbg forward: session {sid} on 127.0.0.1:{port} "
                  f"(DAP clients of uid {os.getuid()}: connect to this port; Ctrl-C to stop)", flush=True)
        try:
            await asyncio.Event().wait()
        finally:
            await fwd.close()

    try:
        asyncio.run(serve())
    except KeyboardInterrupt:
        pass
    return 0


def register(sub: Any) -> None:
    p = sub.add_parser("forward", help="a local port (or unix socket) your DAP client attaches to")
    p.add_argument("session_id", help="session id or any unique prefix of it (see `raydbg list`)")
    p.add_argument("--port", type=int, default=0, help="local port on 127.0.0.1 (default: any free port); "
                   "connections from other users are refused")
    p.add_argument("--unix", nargs="?", const="", metavar="PATH",
                   help="listen on a unix socket instead (in a 0700 directory; default "
                   "<tmp>/raydbg-<uid>/forward/<id>.sock) for clients that speak pipes")
    add_gateway_args(p, json_flag=False)
    p.set_defaults(fn=cmd_forward)
