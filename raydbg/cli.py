"""The `raydbg` command line: run, up, down, status, list, forward (and subcommands of other parts)."""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

# Only what building the parser needs is imported here: each command imports its own (asyncio,
# json, Ray, the telemetry reader, Textual) when it runs. `raydbg list` from a shell is mostly
# Python's start and these imports (tests/test_cli_imports.py keeps them out).
from raydbg.client import GatewayError
from raydbg.commands.base import UserError, add_gateway_args, gateway_from_args, print_json

if TYPE_CHECKING:
    from raydbg.client import Gateway


# --- run / up / down ------------------------------------------------------------
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


# --- status / list ----------------------------------------------------------------
def cmd_status(args: argparse.Namespace) -> int:
    import asyncio
    import time

    from raydbg.private_dir import private_dir_problem

    local_problem = private_dir_problem()
    if local_problem:  # said first: discovery may fail because of it
        print(f"this machine: {local_problem}", file=sys.stderr)
    gw = gateway_from_args(args)
    status = asyncio.run(gw.status())
    if args.json:
        print_json(status)
        return 0
    from raydbg.commands import versions

    print(f"raydbg {status['version']} active: gateway {status['gateway']} "
          f"(ray {status['ray_version']}, debugpy {status['debugpy_version']})")
    print(versions.client_line())
    print(f"paused sessions: {status['sessions']}")
    for agent in status["agents"]:
        head = " (head)" if agent.get("is_head") else ""
        ray, python = versions.agent_versions(agent)
        print(f"  agent {agent['node_id'][:12]} {agent['node_ip']}:{agent['port']} pid {agent['pid']}{head}"
              f" ray {ray}, python {python}")
        if agent.get("started_by"):
            started = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(float(agent.get("started_at") or 0)))
            print(f"    started by {agent['started_by']} at {started}")
        mon = agent.get("memory_monitor") or {"state": "unknown (an older agent)"}
        why = f": {mon['reason']}" if mon.get("reason") else ""
        print(f"    memory monitor: {mon.get('state')}{why}")
        if agent.get("private_dir"):
            print(f"    cannot pause workers here: {agent['private_dir']}")
        if agent.get("metrics_url"):
            print(f"    metrics: {agent['metrics_url']} (bearer token: the same as for raydbg clients)")
    if "history" in status:  # an older gateway's answer has no such field
        from raydbg.history.writer import status_line

        print(status_line(status["history"]))
    for line in versions.notes(status):  # versions that differ, what the cluster's Ray lacks
        print(line)
    return 0


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


# --- forward ----------------------------------------------------------------------
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


# --- prometheus -------------------------------------------------------------------
def cmd_prometheus(args: argparse.Namespace) -> int:
    """Write a file_sd target file of every agent's /metrics and print the scrape config."""
    import asyncio

    from raydbg import auth
    from raydbg.telemetry.prometheus import scrape_config, write_file_sd

    gw = gateway_from_args(args)
    agents = asyncio.run(gw.agents())
    path = write_file_sd(args.file_sd, agents)
    token_file = args.token_file or str(auth.token_file_for(gw.address))
    print(f"# {len(agents)} agent(s) written to {path}; add this to prometheus.yml:")
    print(scrape_config(file_sd_path=path, bearer_token_file=token_file), end="")
    return 0


# --- parser -----------------------------------------------------------------------
Registrar = Callable[[Any], None]


def _register_core(sub: Any) -> None:
    p = sub.add_parser("run", help="run a command with raydbg active (RAY_DEBUG=1)")
    p.add_argument("--post-mortem", action="store_true", help="also pause on unhandled task errors")
    p.add_argument("cmd", nargs=argparse.REMAINDER)
    p.set_defaults(fn=cmd_run)
    p = sub.add_parser("up", help="start raydbg's node agents and gateway on the cluster")
    p.add_argument("--json", action="store_true")
    p.set_defaults(fn=cmd_up)
    p = sub.add_parser("down", help="stop raydbg's node agents")
    p.set_defaults(fn=cmd_down)
    p = sub.add_parser("status", help="is raydbg active: agents, gateway, sessions, versions")
    add_gateway_args(p)
    p.set_defaults(fn=cmd_status)
    p = sub.add_parser("list", help="paused debug sessions, cluster-wide")
    add_gateway_args(p)
    p.set_defaults(fn=cmd_list)
    p = sub.add_parser("events", help="memory-monitor kills and session events (oldest first)")
    p.add_argument("--limit", type=int, default=50)
    p.add_argument("--follow", action="store_true", help="keep printing new events")
    add_gateway_args(p)
    p.set_defaults(fn=cmd_events)
    p = sub.add_parser("forward", help="a local port (or unix socket) your DAP client attaches to")
    p.add_argument("session_id", help="session id or any unique prefix of it (see `raydbg list`)")
    p.add_argument("--port", type=int, default=0, help="local port on 127.0.0.1 (default: any free port); "
                   "connections from other users are refused")
    p.add_argument("--unix", nargs="?", const="", metavar="PATH",
                   help="listen on a unix socket instead (in a 0700 directory; default "
                   "<tmp>/raydbg-<uid>/forward/<id>.sock) for clients that speak pipes")
    add_gateway_args(p, json_flag=False)
    p.set_defaults(fn=cmd_forward)
    p = sub.add_parser("prometheus", help="file_sd targets + scrape config for every agent's /metrics")
    p.add_argument("--file-sd", default="raydbg_targets.json", help="target file to write")
    add_gateway_args(p, json_flag=False)
    p.set_defaults(fn=cmd_prometheus)


# Each feature's subcommands (raydbg/commands/, tui/command.py), imported when the parser is built.
def _register_telemetry(sub: Any) -> None:
    from raydbg.commands.telemetry import register  # trace, goodput

    register(sub)


def _register_tui(sub: Any) -> None:
    from raydbg.tui.command import register  # tui, attach

    register(sub)


def _register_continue(sub: Any) -> None:
    from raydbg.commands.continue_cmd import register  # continue

    register(sub)


def _register_stacks(sub: Any) -> None:
    from raydbg.commands.stacks import register  # stacks

    register(sub)


def _register_pause(sub: Any) -> None:
    from raydbg.commands.pause import register  # pause

    register(sub)


def _register_steps(sub: Any) -> None:
    from raydbg.commands.steps import register  # steps

    register(sub)


def _register_breakpoints(sub: Any) -> None:
    from raydbg.commands.breakpoints import register  # break add|list|rm

    register(sub)


def _register_history(sub: Any) -> None:
    from raydbg.commands.history import register  # history [show|report]

    register(sub)


REGISTRARS: list[Registrar] = [_register_core, _register_telemetry, _register_tui, _register_continue,
                               _register_stacks, _register_steps, _register_pause, _register_breakpoints,
                               _register_history]


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
    parser = argparse.ArgumentParser(prog="raydbg", description=__doc__)
    parser.add_argument("--version", action=_VersionAction, help="print raydbg's, Ray's, debugpy's and Python's versions, and those of the cluster's agents")
    sub = parser.add_subparsers(dest="command", required=True)
    for register in REGISTRARS:
        register(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    if argv is None:  # the command line itself (tests call main([...]) in their own process)
        from raydbg import config

        config.mark_cli_process()
    args = build_parser().parse_args(argv)
    try:
        return int(args.fn(args) or 0)
    except (UserError, GatewayError) as exc:
        print(f"raydbg: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
