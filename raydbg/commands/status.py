"""`raydbg status`: is raydbg active on the cluster: its agents, gateway, sessions and versions."""

from __future__ import annotations

import argparse
import sys
from typing import Any

from raydbg.commands.base import add_gateway_args, gateway_from_args, print_json


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


def register(sub: Any) -> None:
    p = sub.add_parser("status", help="is raydbg active: agents, gateway, sessions, versions")
    add_gateway_args(p)
    p.set_defaults(fn=cmd_status)
