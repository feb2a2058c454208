"""`raydbg history`: jobs' records read with no cluster (list, show, report); no Ray import.

`raydbg history [PATH|URI]` lists the jobs found, newest first; `history show JOB|RUN`
prints what the live commands printed (events, the hang's chain, stragglers, kills,
attempts, goodput); `history report JOB|RUN --html out.html` writes the self-contained page.
The place is the argument, else `--from`, else RAYDBG_HISTORY, else ~/.raydbg/history.
"""

from __future__ import annotations

import argparse
import time
from typing import Any

from raydbg.commands.base import UserError, print_json

ACTIONS = ("show", "report")


def _store(where: str | None) -> Any:
    from raydbg.history import store

    try:
        return store.open_store(where)
    except OSError as exc:
        raise UserError(str(exc)) from None


def _load(args: argparse.Namespace) -> dict[str, Any]:
    from raydbg.history import reader, view

    s = _store(args.source)
    try:
        record = reader.load(s, reader.resolve(s, args.name))
    except OSError as exc:
        raise UserError(str(exc).removeprefix("raydbg: ")) from None
    return _checked(view.build, record)


def _checked(fn: Any, *a: Any) -> Any:
    """`fn(*a)`; a record whose entries hold values of the wrong type (written by hand, or by a
    newer raydbg) is said in one line."""
    try:
        return fn(*a)
    except (TypeError, ValueError, KeyError, AttributeError) as exc:
        raise UserError(f"history: the record holds an entry raydbg cannot read ({type(exc).__name__}: {exc})") from None


def cmd_list(args: argparse.Namespace) -> int:
    from raydbg.history import reader

    s = _store(args.source)
    try:
        found = reader.jobs(s)
    except OSError as exc:
        raise UserError(f"cannot list {s.where}: {exc}") from None
    if args.json:
        print_json(found)
        return 0
    if not found:
        print(f"no job records in {s.where}")
    for m in found:
        when = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(m.get("last_ts") or 0))
        counts = ", ".join(f"{n} {k}" for k, n in sorted((m.get("counts") or {}).items()))
        runs = f"  runs: {', '.join(m['runs'])}" if m.get("runs") else ""
        print(f"{m['record']:<40} job {m['job_id']:<10} last {when}  {counts}{runs}")
    return 0


def cmd_show(args: argparse.Namespace) -> int:
    from raydbg.history import view

    v = _load(args)
    if args.json:
        print_json(v)
    else:
        print(_checked(view.render, v))
    return 0


def cmd_report(args: argparse.Namespace) -> int:
    from raydbg.history import html

    v = _load(args)
    page = _checked(html.render, v)
    try:
        with open(args.html, "w", encoding="utf-8") as f:
            f.write(page)
    except OSError as exc:
        raise UserError(f"cannot write {args.html}: {exc.strerror}") from None
    print(f"report of job {v['job_id']}: {args.html} ({len(page) // 1024} KiB)")
    return 0


def cmd_history(args: argparse.Namespace) -> int:
    """`history [PATH|URI]`, `history show NAME [PATH|URI]`, `history report NAME --html F`."""
    words = list(args.words)
    if not words or words[0] not in ACTIONS:
        if len(words) > 1:
            raise UserError(f"history: expected `show` or `report`, got {words[0]!r}")
        args.source = words[0] if words else args.source
        return cmd_list(args)
    action, rest = words[0], words[1:]
    if not rest or len(rest) > 2:
        raise UserError(f"usage: raydbg history {action} JOB|RUN [PATH|URI]")
    args.name = rest[0]
    args.source = rest[1] if len(rest) > 1 else args.source
    if action == "show":
        return cmd_show(args)
    if not args.html:
        raise UserError("history report: pass --html OUT.html")
    return cmd_report(args)


def register(sub: Any) -> None:
    p = sub.add_parser("history", help="jobs' durable records, read with no cluster: list, show JOB|RUN, report",
                       description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("words", nargs="*", metavar="[show|report] [JOB|RUN] [PATH|URI]",
                   help="nothing or a place: list the jobs; `show JOB|RUN`; `report JOB|RUN --html F`")
    p.add_argument("--from", dest="source", help="the records' place (default: RAYDBG_HISTORY, else ~/.raydbg/history)")
    p.add_argument("--html", help="report: the HTML file to write")
    p.add_argument("--json", action="store_true", help="print JSON")
    p.set_defaults(fn=cmd_history, intermixed="words")  # `show --json JOB` as well as `show JOB --json`


