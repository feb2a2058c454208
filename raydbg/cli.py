"""The `raydbg` command line: the parser built from every command module's `register`, and `main`.

The commands themselves live in raydbg/commands/ (one module each, or one per feature)
and raydbg/tui/command.py; this module only lists them, in the order `--help` shows.
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

# Only what building the parser needs is imported here: each command imports its own (asyncio,
# json, Ray, the telemetry reader, Textual) when it runs. `raydbg list` from a shell is mostly
# Python's start and these imports (tests/test_cli_imports.py keeps them out).
from raydbg.client import GatewayError
from raydbg.commands import (
    breakpoints,
    continue_cmd,
    events,
    forward,
    history,
    lifecycle,
    list_sessions,
    pause,
    prometheus,
    stacks,
    status,
    steps,
    telemetry,
)
from raydbg.commands.base import UserError
from raydbg.tui import command as tui_command

# What `raydbg --help` says first.
DESCRIPTION = "The `raydbg` command line: run, up, down, status, list, forward (and subcommands of other parts)."
# run up down, status, list, events, forward, prometheus, trace goodput, tui attach, continue,
# stacks, steps, pause, break add|list|rm, history [show|report]
COMMANDS = (lifecycle, status, list_sessions, events, forward, prometheus, telemetry, tui_command, continue_cmd,
            stacks, steps, pause, breakpoints, history)


class _VersionAction(argparse.Action):
    """argparse's `version` action, with the versions looked up only when asked for
    (compat reads the installed packages' metadata: tens of ms every other command would pay)."""

    def __init__(self, option_strings: list[str], dest: str = argparse.SUPPRESS,
                 default: str = argparse.SUPPRESS, help: str | None = None) -> None:  # noqa: A002
        super().__init__(option_strings=option_strings, dest=dest, default=default, nargs=0, help=help)

    def __call__(self, parser: argparse.ArgumentParser, namespace: argparse.Namespace,
                 values: Any, option_string: str | None = None) -> None:
        from raydbg import compat
        from raydbg.commands import versions

        parser._print_message(compat.versions_line() + "\n", sys.stdout)
        status = _cluster_status_if_any()
        if status is not None:
            parser._print_message("".join(f"{x}\n" for x in versions.lines(status)), sys.stdout)
        parser.exit()


def _cluster_status_if_any() -> dict[str, Any] | None:
    """The gateway's status for `--version`, when this machine's files name raydbg's gateway
    (RAY_ADDRESS's cluster or the local one); None, quietly, otherwise: --version never
    waits on a cluster that is not there."""
    from raydbg.client import Gateway

    try:
        return dict(Gateway.discover(ask_gcs=False).call("GET", "/api/v1/status", timeout=5))
    except Exception:
        return None


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="raydbg", description=DESCRIPTION)
    parser.add_argument("--version", action=_VersionAction, help="print raydbg's, Ray's, debugpy's and Python's versions, and those of the cluster's agents")
    sub = parser.add_subparsers(dest="command", required=True)
    for module in COMMANDS:
        module.register(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    if argv is None:  # the command line itself (tests call main([...]) in their own process)
        from raydbg import config

        config.mark_cli_process()
    parser = build_parser()
    args, extra = parser.parse_known_args(argv)
    if extra:  # words after an option (`history show --json JOB`): argparse leaves them over
        into = getattr(args, "intermixed", None)  # the command's positionals that may follow options
        if into is None or any(x.startswith("-") for x in extra):
            parser.error("unrecognized arguments: " + " ".join(extra))
        setattr(args, into, [*getattr(args, into), *extra])
    try:
        return int(args.fn(args) or 0)
    except (UserError, GatewayError) as exc:
        print(f"raydbg: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
