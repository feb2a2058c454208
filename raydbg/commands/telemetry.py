"""`raydbg trace` and `raydbg goodput`: read the embedded JSON lines without any other tool.

`register(subparsers)` adds both to the `raydbg` argparse parser (raydbg/cli.py).
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

from raydbg.commands.base import add_gateway_args

# The telemetry reader, the goodput report and json are imported by the commands that use them:
# building the parser (every `raydbg` command) must not pay for them.


def _dirs(args: argparse.Namespace) -> list[str]:
    from raydbg.telemetry import reader

    return list(args.dir) if args.dir else reader.default_dirs()


def _fail(message: str) -> int:
    print(f"raydbg: {message}", file=sys.stderr)
    return 1


def _clock(ts: float) -> str:
    import datetime

    return datetime.datetime.fromtimestamp(ts).strftime("%H:%M:%S.%f")[:-3]


def cmd_trace(args: argparse.Namespace) -> int:
    import json

    from raydbg.telemetry import reader

    dirs = _dirs(args)
    if not reader.files(dirs):
        return _fail(
            f"no telemetry files in {dirs or 'the default places'}; pass --dir DIR or set RAYDBG_TELEMETRY_DIR "
            "(the default is <ray session dir>/raydbg-<uid>/telemetry)"
        )
    found = reader.spans(dirs, name=args.name, job=args.job, trace=args.trace)
    if args.stats:
        rows = reader.summarize(found)
        if args.json:
            print(json.dumps(rows, indent=2))
            return 0
        print(
            f"{'name':<44} {'count':>7} {'total s':>9} {'mean ms':>9} {'p50 ms':>9} {'p95 ms':>9} {'max ms':>9}"
        )
        for r in rows:
            print(
                f"{r['name'][:44]:<44} {r['count']:>7} {r['total']:>9.2f} {r['mean'] * 1e3:>9.1f} "
                f"{r['p50'] * 1e3:>9.1f} {r['p95'] * 1e3:>9.1f} {r['max'] * 1e3:>9.1f}"
            )
        return 0
    last = found[-args.last :] if args.last > 0 else found
    if args.json:
        print(json.dumps(last, indent=2, default=str))
        return 0
    print(
        f"{'end':<12} {'duration':>10}  {'status':<6} {'process':<16} {'trace':<8} name  attributes"
    )
    for s in last:
        attrs = {k: v for k, v in s["attributes"].items() if not k.startswith("ray.")}
        shown = " ".join(f"{k}={v}" for k, v in list(attrs.items())[:6])
        print(
            f"{_clock(s['end']):<12} {s['duration'] * 1e3:>8.1f}ms  {s['status']:<6} "
            f"{reader.process_label(s)[:16]:<16} {str(s['trace_id'])[:8]:<8} {s['name']}  {shown}"
        )
    print(f"({len(last)} of {len(found)} spans from {', '.join(dirs)})", file=sys.stderr)
    return 0


def _train_runs(args: argparse.Namespace, run: str) -> tuple[list[dict[str, Any]], str | None]:
    """The Train runs `run` names with their attempts, from the gateway (Train's state actor),
    and why there are none to show when the gateway could not be asked."""
    import asyncio

    from raydbg.client import GatewayError
    from raydbg.commands.base import gateway_from_args
    from raydbg.telemetry import attempts

    try:
        found = asyncio.run(gateway_from_args(args).train_runs())
    except GatewayError as exc:
        return [], str(exc)
    return attempts.matching(found, run), None


def cmd_goodput(args: argparse.Namespace) -> int:
    import json

    from raydbg.telemetry import attempts, goodput
    from raydbg.telemetry.goodput_report import goodput_report

    report: goodput.Report | None = None
    png = None
    try:
        png_path = None if args.no_png else (args.png or "raydbg-goodput-{run}.png")
        report, png = goodput_report(args.run, _dirs(args), args.rank, png_path)
        no_spans = None
    except ValueError as exc:
        no_spans = str(exc)
    runs, no_gateway = ([], "not asked (--no-attempts)") if args.no_attempts else _train_runs(
        args, report.run if report else args.run)
    if report is None and not runs:
        return _fail(str(no_spans))
    if args.json:
        head = report.as_dict() if report else {"run": args.run, "error": no_spans}
        print(json.dumps({**head, "png": png, "train_runs": runs, "train_runs_error": no_gateway}, indent=2))
        return 0
    if report is not None:
        print(goodput.table(report))
        if png:
            print(f"timeline: {png}")
    else:
        print(f"raydbg: no goodput table: {no_spans}", file=sys.stderr)
    for r in runs:
        print("\n".join(attempts.run_lines(r)))
    if not runs and not args.no_attempts:
        why = no_gateway or "Ray Train's state knows no such run (it needs RAY_TRAIN_ENABLE_STATE_TRACKING=1)"
        print(f"attempts: not shown: {why}", file=sys.stderr)
    return 0


def register(sub: Any) -> None:
    """Add `trace` and `goodput` to the `raydbg` subcommands."""
    p = sub.add_parser("trace", help="recent spans from the embedded telemetry files")
    p.add_argument("-n", "--last", type=int, default=20, help="how many spans (0: all)")
    p.add_argument("--name", help="span name: glob or substring")
    p.add_argument("--job", help="Ray job id (or prefix)")
    p.add_argument("--trace", help="trace id (or prefix)")
    p.add_argument("--stats", action="store_true", help="durations per span name instead")
    p.add_argument("--dir", action="append", help="telemetry directory (repeatable)")
    p.add_argument("--json", action="store_true", help="print JSON")
    p.set_defaults(fn=cmd_trace)
    p = sub.add_parser("goodput", help="where a training run's wall time went (table + PNG)")
    p.add_argument("run", help="run id (span attribute train.run.id), Ray job id, or 'latest'")
    p.add_argument("--rank", type=int, default=0, help="Ray Train rank to account (default 0)")
    p.add_argument("--png", help="timeline PNG path (default raydbg-goodput-RUN.png)")
    p.add_argument("--no-png", action="store_true", help="table only")
    p.add_argument("--dir", action="append", help="telemetry directory (repeatable)")
    p.add_argument("--json", action="store_true", help="print JSON")
    p.add_argument("--no-attempts", action="store_true",
                   help="do not ask the cluster (the raydbg gateway) for the run's Train attempts")
    add_gateway_args(p, json_flag=False)
    p.set_defaults(fn=cmd_goodput)
