"""The small base every `raydbg` subcommand stands on: the user's error, the gateway arguments, JSON out."""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from raydbg.client import Gateway


class UserError(Exception):
    """Printed as one line, exit code 1, no traceback."""


def add_gateway_args(parser: argparse.ArgumentParser, json_flag: bool = True) -> None:
    """--address and --token-file (how to reach the gateway), and --json unless the command adds its own."""
    parser.add_argument("--address", help="gateway HOST:PORT (default: found from the Ray cluster)")
    parser.add_argument("--token-file", help="file holding the raydbg token")
    if json_flag:
        parser.add_argument("--json", action="store_true", help="print JSON")


def gateway_from_args(args: argparse.Namespace) -> Gateway:
    """The gateway that --address / --token-file name, else the one found (GatewayError if none)."""
    from raydbg.client import Gateway

    return Gateway.discover(getattr(args, "address", None), getattr(args, "token_file", None))


def print_json(data: Any) -> None:
    import json

    print(json.dumps(data, indent=2, sort_keys=True))
