"""`raydbg steps`: each Train rank's recent steps, cluster-wide: work, who waited for whom; stragglers marked (table or --json)."""

from __future__ import annotations

import argparse
import shutil
import sys
from typing import Any

from raydbg.commands.base import add_gateway_args, gateway_from_args, print_json

COLUMNS = ["RANK", "NODE", "PID", "STEP", "WORK", "DATA", "WAITED FOR OTHERS", "OTHERS WAITED FOR IT", "LAST",
           "RECENT WORK (s, oldest first)"]
LEGEND = ("  (medians per step, s: WORK outside waits at collectives; WAITED FOR OTHERS at the step's collectives "
          "and its report; OTHERS WAITED FOR IT: theirs for this rank alone)")


def _s(value: float | None) -> str:
    return "-" if value is None else f"{value:.3f}"


def render(answer: dict[str, Any], width: int | None) -> str:
    from raydbg.table_layout import render as table

    runs = answer.get("runs") or []
    lines = [] if runs else ["no Ray Train run with step times: ranks report them at ray.train.report "
                             "or raydbg.progress() in an activated job"]
    for run in runs:
        slow = run.get("stragglers") or []
        flag = (f"straggler(s): rank {', '.join(map(str, slow))}" if slow
                else f"no straggler (>{run.get('factor')}x the others for {run.get('steps')} steps)")
        lines.append(f"Train run {run['train_run']} (job {run['job_id']}): {flag}")
        rows = [[f"{r['world_rank']}{' *' if r.get('straggler') else ''}", str(r.get("node_id") or "")[:8],
                 str(r.get("pid") or ""), str(r.get("step") or ""), _s(r.get("busy_median_s")),
                 _s(r.get("data_median_s")), _s(r.get("wait_median_s")), _s(r.get("late_median_s")),
                 f"{r.get('last_progress_s')}s ago",
                 " ".join(f"{t:.2f}" for t in r.get("busy_s") or [])] for r in run.get("ranks") or []]
        lines += ["  " + line for line in table(COLUMNS, rows, width, drop_order=["PID", "NODE", "DATA", "LAST"])]
        unchecked = sorted(r["world_rank"] for r in run.get("ranks") or [] if r.get("clock") == "unchecked")
        if unchecked:
            lines.append(f"  ranks {', '.join(map(str, unchecked))}: another node's clock, not lined up "
                         "(no ray.train.report per step): their waits assume the clocks agree")
    if runs:
        lines.append(LEGEND)
    for err in answer.get("errors") or []:
        lines.append(f"node {err.get('node_id')}: {err.get('error')}")
    return "\n".join(lines)


def cmd_steps(args: argparse.Namespace) -> int:
    import asyncio

    answer = asyncio.run(gateway_from_args(args).steps(args.job, args.run))
    if args.json:
        print_json(answer)
    else:
        width = shutil.get_terminal_size().columns if sys.stdout.isatty() else None
        print(render(answer, width))
    return 0


def register(sub: Any) -> None:
    p = sub.add_parser("steps", help="each Train rank's recent steps (work, waited for others, others waited for it); stragglers marked")
    p.add_argument("--job", help="only this Ray job (hex id)")
    p.add_argument("--run", help="only this Ray Train run (name)")
    add_gateway_args(p)
    p.set_defaults(fn=cmd_steps)
