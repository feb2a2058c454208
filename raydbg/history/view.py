"""A loaded record, sorted into what the text and the HTML report show, and the text itself (pure; runs in `raydbg history`).

Sections: the job (versions, nodes), Train runs with their attempts (telemetry/attempts.py's
summaries, printed by its `run_lines`), events (as `raydbg events` prints them; a hang's
wait-for chain, culprits and stack classes; a kill's decision), per-rank step times, each
node's memory over time, and goodput from the spans (telemetry/goodput.py).
"""

from __future__ import annotations

import statistics
import time
from typing import Any

from raydbg.telemetry import attempts as attempts_mod
from raydbg.telemetry import goodput


def build(record: dict[str, Any]) -> dict[str, Any]:
    """The sections of one job's record (plain JSON values)."""
    job: dict[str, Any] = {}
    nodes: dict[str, dict[str, Any]] = {}
    events: list[dict[str, Any]] = []
    runs: dict[str, dict[str, Any]] = {}
    steps: dict[str, dict[str, list[list[float]]]] = {}
    memory: dict[str, list[list[float]]] = {}
    spans: list[dict[str, Any]] = []
    dropped = 0
    for e in record["entries"]:
        d, kind = e["data"], e["kind"]
        if kind == "job":
            job.update(d)
        elif kind == "node" and d.get("node_id"):
            nodes[d["node_id"]] = d
        elif kind == "event":
            events.append(d)
        elif kind == "attempt" and d.get("number") is not None:
            run = runs.setdefault(str(d.get("run_id") or d.get("run")), {"attempts": {}})
            run.update(run=d.get("run"), run_id=d.get("run_id"), job_id=record["job_id"], status=d.get("run_status"),
                       started=run.get("started") or d.get("started"), ended=d.get("run_ended"),
                       error=d.get("run_error"))
            run["attempts"][int(d["number"])] = {k: v for k, v in d.items() if not k.startswith("run")}
        elif kind == "steps" and d.get("world_rank") is not None:
            by_rank = steps.setdefault(str(d.get("train_run") or "?"), {})
            by_rank.setdefault(str(d["world_rank"]), []).append([e["ts"], d.get("step") or 0, d.get("busy_s") or 0.0])
        elif kind == "memory" and d.get("node_id"):
            memory.setdefault(d["node_id"], []).append([e["ts"], d.get("used") or 0, d.get("limit") or 0])
        elif kind == "span":
            spans.append(d)
        elif kind == "gap":
            dropped += int(d.get("dropped") or 0)
    train_runs = [dict(r, attempts=[r["attempts"][n] for n in sorted(r["attempts"])]) for r in runs.values()]
    train_runs.sort(key=lambda r: r.get("started") or 0)
    entries = record["entries"]
    return {
        "job_id": record["job_id"], "record": record.get("record", record["job_id"]), "where": record.get("where"), "job": job, "nodes": list(nodes.values()),
        "first_ts": entries[0]["ts"] if entries else None, "last_ts": entries[-1]["ts"] if entries else None,
        "events": sorted(events, key=lambda ev: ev.get("ts") or 0), "train_runs": train_runs, "steps": steps,
        "memory": memory, "goodput": goodput_reports(spans), "dropped": dropped,
        "skipped_lines": record.get("skipped_lines", 0),
    }


def goodput_reports(spans: list[dict[str, Any]]) -> list[dict[str, Any]]:
    out = []
    for run in goodput.run_ids(spans):
        chosen = goodput.select(spans, run, 0)
        if chosen:
            try:
                report = goodput.compute(chosen, run)
                out.append(dict(report.as_dict(), table=goodput.table(report)))
            except Exception as exc:  # a partial run's spans: say so, do not fail the report
                out.append({"run": run, "error": f"{type(exc).__name__}: {exc}"})
    return out


def _clock(ts: float | None) -> str:
    return "?" if ts is None else time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(ts))


def event_lines(ev: dict[str, Any]) -> list[str]:
    """An event as `raydbg events` prints it, then what its kind adds (indented)."""
    when = time.strftime("%H:%M:%S", time.localtime(ev.get("ts", 0)))
    out = [f"{when}  {ev.get('kind', '?'):<18} {ev.get('message', '')}"]
    d = ev.get("details") or {}
    kind = ev.get("kind")
    if kind == "hang":
        out += [f"      {line}" for line in d.get("chain") or []]
        for c in d.get("culprits") or []:
            klass = c.get("stack_class") or {}
            out.append(f"      culprit rank {c.get('world_rank')} (pid {c.get('pid')}): {klass.get('summary') or '?'}")
        for c in d.get("classes") or []:
            out.append(f"      {c.get('count')}/{c.get('total')}  {c.get('summary')}")
    elif kind == "straggler" and d.get("stack_class"):
        out.append(f"      at: {d['stack_class'].get('summary')}")
    elif kind in ("memory.kill", "memory.dry-run") and d.get("decision"):
        out.append(f"      {d['decision']}")
    return out


def step_rows(steps: dict[str, dict[str, list[list[float]]]]) -> list[str]:
    out = []
    for run, ranks in steps.items():
        out.append(f"Train run {run}: step times per rank (s; median, max of the samples)")
        meds = {r: statistics.median(p[2] for p in pts) for r, pts in ranks.items() if pts}
        others = statistics.median(meds.values()) if meds else 0.0
        for rank in sorted(ranks, key=lambda r: int(r) if r.isdigit() else 0):
            pts = ranks[rank]
            slow = "  <- slowest" if len(meds) > 1 and meds[rank] == max(meds.values()) and meds[rank] > 1.5 * others else ""
            out.append(f"  rank {rank:>4}  steps to {int(pts[-1][1]):>6}  median {meds[rank]:.3f}  "
                       f"max {max(p[2] for p in pts):.3f}{slow}")
    return out


def render(v: dict[str, Any]) -> str:
    """The text of `raydbg history show`."""
    j = v["job"]
    lines = [f"job {v['job_id']} (record {v['record']})  {_clock(v['first_ts'])} .. {_clock(v['last_ts'])}  (from {v['where']})"]
    if j:
        lines.append(f"  raydbg {j.get('raydbg', '?')}, ray {j.get('ray', '?')}, python {j.get('python', '?')}")
    for n in v["nodes"]:
        lines.append(f"  node {str(n.get('node_id'))[:12]} {n.get('node_ip', '')}{' (head)' if n.get('is_head') else ''}"
                     f" ray {n.get('ray', '?')}, python {n.get('python', '?')}")
    for r in v["train_runs"]:
        lines += [""] + attempts_mod.run_lines(r)
    lines += ["", f"events ({len(v['events'])}):"] if v["events"] else ["", "no events"]
    for ev in v["events"]:
        lines += ["  " + x for x in event_lines(ev)]
    if v["steps"]:
        lines += [""] + step_rows(v["steps"])
    for node, pts in v["memory"].items():
        peak = max(pts, key=lambda p: p[1] / p[2] if p[2] else 0)
        lines.append(f"memory node {node[:12]}: peak {peak[1] / 2**30:.2f} of {peak[2] / 2**30:.2f} GiB at "
                     f"{time.strftime('%H:%M:%S', time.localtime(peak[0]))} ({len(pts)} samples)")
    for g in v["goodput"]:
        if "error" in g:
            lines += ["", f"goodput of run {g['run']}: not computed ({g['error']})"]
        else:
            lines += ["", g["table"]]  # as `raydbg goodput` prints it
    if v["dropped"] or v["skipped_lines"]:
        lines.append(f"(the writer dropped {v['dropped']} entries; {v['skipped_lines']} torn or unreadable lines skipped)")
    return "\n".join(lines)
