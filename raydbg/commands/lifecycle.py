"""`raydbg run`, `up` and `down`: a command run with raydbg active, raydbg's agents started and stopped on a cluster."""

from __future__ import annotations

import argparse
import os
from typing import Any

from raydbg.commands.base import UserError, print_json


def cmd_run(args: argparse.Namespace) -> int:
    if not args.cmd:
        raise UserError("usage: raydbg run -- COMMAND [ARGS...]")
    from raydbg.activation import enable_in_environ

    env = dict(os.environ)
    env.setdefault("RAY_DEBUG", "1")
    if args.post_mortem:
        env["RAY_DEBUG_POST_MORTEM"] = "1"
    enable_in_environ(env)
    cmd = args.cmd[1:] if args.cmd[0] == "--" else args.cmd
    try:
        os.execvpe(cmd[0], cmd, env)
    except FileNotFoundError:
        raise UserError(f"command not found: {cmd[0]}") from None
    return 0


TOKEN_HINT = ("the cluster uses Ray's token authentication: run with RAY_AUTH_MODE=token "
              "(the token in ~/.ray/auth_token or RAY_AUTH_TOKEN)")


def _connect_ray() -> None:
    import logging

    import ray

    address = os.environ.get("RAY_ADDRESS") or "auto"
    refused = getattr(ray.exceptions, "AuthenticationError", ())  # Ray >= 2.52
    try:
        ray.init(address=address, namespace="raydbg", logging_level=logging.ERROR, log_to_driver=False)
    except refused:
        raise UserError(f"Ray refused the connection: {TOKEN_HINT}") from None
    except ConnectionError as exc:
        # A token-auth cluster refuses a client without RAY_AUTH_MODE=token the same way.
        hint = "" if os.environ.get("RAY_AUTH_MODE", "").lower() == "token" else f"; or, if {TOKEN_HINT}"
        raise UserError(f"no Ray cluster to connect to ({exc}); start one with `ray start --head`{hint}") from None


def cmd_up(args: argparse.Namespace) -> int:
    from raydbg import compat
    from raydbg.agent_host import lifecycle

    if compat.problem():  # no agent on a Ray whose internals raydbg was not written for
        raise UserError(str(compat.problem()))
    _connect_ray()
    agents = lifecycle.up()
    from raydbg import registry

    gateway = registry.get(registry.GATEWAY) or {}
    if args.json:
        print_json({"gateway": gateway.get("address"), "agents": agents})
    else:
        print(f"raydbg up: {len(agents)} agent(s); gateway {gateway.get('address')}")
    return 0


def cmd_down(args: argparse.Namespace) -> int:
    from raydbg.agent_host import lifecycle

    _connect_ray()
    print(f"raydbg down: stopped {lifecycle.down()} agent(s)")
    return 0


def register(sub: Any) -> None:
    p = sub.add_parser("run", help="run a command with raydbg active (RAY_DEBUG=1)")
    p.add_argument("--post-mortem", action="store_true", help="also pause on unhandled task errors")
    p.add_argument("cmd", nargs=argparse.REMAINDER)
    p.set_defaults(fn=cmd_run)
    p = sub.add_parser("up", help="start raydbg's node agents and gateway on the cluster")
    p.add_argument("--json", action="store_true")
    p.set_defaults(fn=cmd_up)
    p = sub.add_parser("down", help="stop raydbg's node agents")
    p.set_defaults(fn=cmd_down)
