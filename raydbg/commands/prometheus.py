"""`raydbg prometheus`: a file_sd target file of every agent's /metrics, and the scrape config."""

from __future__ import annotations

import argparse
from typing import Any

from raydbg.commands.base import add_gateway_args, gateway_from_args


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


def register(sub: Any) -> None:
    p = sub.add_parser("prometheus", help="file_sd targets + scrape config for every agent's /metrics")
    p.add_argument("--file-sd", default="raydbg_targets.json", help="target file to write")
    add_gateway_args(p, json_flag=False)
    p.set_defaults(fn=cmd_prometheus)
