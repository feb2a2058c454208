"""The terminal report of `raydbg stacks`: per Train run its classes by rank, then other workers (pure)."""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import Any

from raydbg.gang import frames, stack_classes
from raydbg.gang.ranks import rank_ranges
from raydbg.telemetry.attempts import attempt_line


def _ranks(ranks: Sequence[int]) -> str:
    return f"{'rank' if len(ranks) == 1 else 'ranks'} {rank_ranges(ranks)}"


def _age(seconds: float | None) -> str:
    return "never" if seconds is None else f"{seconds:.0f}s ago"


def _worker_name(w: dict[str, Any]) -> str:
    what = w.get("actor_name") or w.get("task_name") or "?"
    return f"pid {w.get('pid')} {what}"


def _collective(brief: dict[str, Any] | None, what: str) -> str:
    if not brief:
        return f"{what} none"
    return f"{what} {brief.get('op')} #{brief.get('seq')} {brief.get('sizes')} ({_age(brief.get('since_s'))})"


def run_lines(run: dict[str, Any], workers: list[dict[str, Any]]) -> list[str]:
    members = [w for w in workers if w.get("train_run") == run["run"] and w.get("job_id") == run["job_id"]
               and w.get("threads")]
    size = run["world_size"]
    lines = [f"run {run['run']}  world size {size}  (job {run['job_id']})"]
    lines += [f"  {attempt_line(a)}" for a in run.get("attempts") or []]  # Train's restarts, oldest first
    for cls in stack_classes.group(members):
        ranks = [int(m["world_rank"]) for m in cls["members"]]
        tag = "  [in a collective]" if cls["in_collective"] else ""
        lines.append(f"  {_ranks(ranks)} ({len(ranks)}/{size}): {cls['summary']}{tag}")
    missing = sorted(set(range(size)) - {int(w["world_rank"]) for w in members})
    if missing:
        lines.append(f"  {_ranks(missing)} ({len(missing)}/{size}): no stacks (see errors)")
    if run["held_by"]:
        lines.append(f"  held by paused {_ranks(run['held_by'])}: the other ranks wait for it")
    if run["waiting"] and run["not_waiting"]:
        lines.append(f"  in a collective: {_ranks(run['waiting'])}; not: {_ranks(run['not_waiting'])}"
                     " (the ones the others wait for)")
    if run.get("chain"):  # the wait-for graph, one hop a line, the culprits' place last
        lines.append("  waits (Flight Recorder, process groups, send/recv):")
        lines += [f"    {line}" for line in run["chain"]]
    for r in run["ranks"]:
        for group, g in sorted((r.get("collectives") or {}).items()):
            lines.append(f"  rank {r['world_rank']} {g.get('label') or group}: {_collective(g.get('started'), 'in')}, "
                         f"{_collective(g.get('completed'), 'done')}")
    ages = [r for r in run["ranks"] if r.get("last_progress_s") is not None]
    if ages:
        lines.append("  last step: " + ", ".join(f"rank {r['world_rank']} {_age(r['last_progress_s'])}"
                                                  for r in ages))
    return lines


def other_lines(workers: list[dict[str, Any]]) -> list[str]:
    rest = [w for w in workers if not w.get("train_run") and w.get("threads")]
    if not rest:
        return []
    by_id = {(w.get("node_id"), w.get("pid")): w for w in rest}
    lines = [f"other workers ({len(rest)})"]
    for cls in stack_classes.group(rest):
        names = [_worker_name(by_id[(m["node_id"], m["pid"])]) for m in cls["members"]]
        shown = ", ".join(names[:4]) + (f" and {len(names) - 4} more" if len(names) > 4 else "")
        lines.append(f"  {cls['count']}/{cls['total']} {shown}: {cls['summary']}")
    return lines


def thread_lines(worker: dict[str, Any]) -> list[str]:
    lines = [f"{_worker_name(worker)} on {worker.get('node_ip') or worker.get('node_id')}"
             + (f" rank {worker['world_rank']}" if worker.get("world_rank") is not None else "")
             + f" ({worker.get('source')})"]
    for t in worker.get("threads") or []:
        state = " paused" if t.get("paused") else (" idle" if t.get("idle") else "")
        lines.append(f"  thread {t.get('name')}{state}")
        for f in t.get("frames") or []:
            mark = "  " if frames.is_internal(f) else "> "
            lines.append(f"    {mark}{f.get('function')} ({os.path.basename(str(f.get('file')))}:{f.get('line')})")
    return lines


def render(answer: dict[str, Any], all_threads: bool = False) -> str:
    workers = list(answer.get("workers") or [])
    lines: list[str] = []
    for run in answer.get("runs") or []:
        lines += run_lines(run, workers)
    lines += other_lines(workers)
    if not workers:
        lines.append("no Ray workers to show")
    fell_back = [w for w in workers if w.get("pyspy_error") and w.get("threads")]
    if fell_back:
        lines.append(f"note: py-spy could not read {len(fell_back)} worker(s), stacks from raydbg's cooperative"
                     f" handler instead ({fell_back[0]['pyspy_error']})")
    if all_threads:
        for w in workers:
            lines += [""] + thread_lines(w)
    for e in answer.get("errors") or []:
        who = f"node {str(e.get('node_id'))[:12]}" + (f" pid {e['pid']}" if e.get("pid") else "")
        lines.append(f"error: {who}: {e.get('error')}")
    lines.append(f"({len(workers)} workers, {answer.get('took_s', 0):.2f}s)")
    return "\n".join(lines)
