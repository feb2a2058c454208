"""The attempts of Ray Train runs: when each started and ended, which rank and node failed and why (pure).

Input: the records `_ray_internals.train_run_records()` reads from Train's state actor
(run: name, run_id, job_id, status, status_detail, start/end_time_ns, attempts; attempt:
attempt_id, status, status_detail, start/end_time_ns, workers with world_rank, node_id,
node_ip, pid). Train writes a failed attempt's errors as one text, a section per group
of ranks that failed alike ("[Rank 1,3 Error Snippet]:" then the traceback): the failed
ranks are read from those headers. No Ray import here: `raydbg goodput` and the gang
report (`/api/v1/stacks`) both print these.
"""

from __future__ import annotations

import datetime
import re
import time
from collections.abc import Sequence
from typing import Any

MAX_ERROR_CHARS = 300
_SNIPPET = re.compile(r"^\[Rank ([\d, ]+) Error Snippet\]:\s*$", re.MULTILINE)


def error_line(text: str | None) -> str | None:
    """The error's first line: in a Python traceback the exception line after its last frame,
    else the first non-empty line (bounded)."""
    lines = [ln for ln in (text or "").splitlines() if ln.strip()]
    if not lines:
        return None
    frames = [i for i, ln in enumerate(lines) if ln.startswith("  File ")]
    found = None
    if frames:  # a chained traceback's last exception comes after its last frame
        found = next((ln for ln in lines[frames[-1] + 1:] if not ln[:1].isspace()), None)
    if found is None:
        found = next((ln for ln in lines if not ln.startswith("Traceback (")), lines[0])
    found = found.strip()
    return found if len(found) <= MAX_ERROR_CHARS else found[:MAX_ERROR_CHARS - 3] + "..."


def rank_errors(detail: str | None) -> list[tuple[list[int], str | None]]:
    """[(ranks, error line)] per "[Rank N,M Error Snippet]:" section of Train's error text."""
    text = detail or ""
    heads = list(_SNIPPET.finditer(text))
    out = []
    for i, head in enumerate(heads):
        body = text[head.end(): heads[i + 1].start() if i + 1 < len(heads) else len(text)]
        ranks = sorted(int(r) for r in head.group(1).replace(" ", "").split(",") if r)
        out.append((ranks, error_line(body)))
    return out


def _seconds(ns: Any) -> float | None:
    return None if ns is None else int(ns) / 1e9


def attempt_summary(number: int, attempt: dict[str, Any], now: float) -> dict[str, Any]:
    started, ended = _seconds(attempt.get("start_time_ns")), _seconds(attempt.get("end_time_ns"))
    by_rank = {w.get("world_rank"): w for w in attempt.get("workers") or []}
    failed: list[dict[str, Any]] = []
    for ranks, why in rank_errors(attempt.get("status_detail")):
        for rank in ranks:
            w = by_rank.get(rank) or {}
            failed.append({"world_rank": rank, "node_id": w.get("node_id"), "node_ip": w.get("node_ip"),
                           "pid": w.get("pid"), "error": why})
    status = str(attempt.get("status") or "")
    error: str | None = None
    if failed:
        error = failed[0]["error"]
    elif status in ("ERRORED", "ABORTED"):
        error = error_line(attempt.get("status_detail"))
    return {
        "number": number,
        "attempt_id": attempt.get("attempt_id"),
        "status": status,
        "started": started,
        "ended": ended,
        "duration_s": None if started is None else max(0.0, (ended if ended is not None else now) - started),
        "failed": failed,
        "error": error,
        "workers": [{k: w.get(k) for k in ("world_rank", "node_id", "node_ip", "pid", "status")}
                    for w in attempt.get("workers") or []],
    }


def summarize(records: Sequence[dict[str, Any]], now: float | None = None) -> list[dict[str, Any]]:
    """One summary per run, oldest run first: its attempts numbered from 1 in the order Train made them."""
    now = time.time() if now is None else now
    out = []
    for r in sorted(records, key=lambda r: int(r.get("start_time_ns") or 0)):
        out.append({
            "run": r.get("name"),
            "run_id": r.get("run_id"),
            "job_id": r.get("job_id"),
            "status": r.get("status"),
            "started": _seconds(r.get("start_time_ns")),
            "ended": _seconds(r.get("end_time_ns")),
            "error": error_line(r.get("status_detail")) if r.get("status") in ("ERRORED", "ABORTED") else None,
            "storage_path": r.get("storage_path"),
            "attempts": [attempt_summary(i, a, now) for i, a in enumerate(r.get("attempts") or [], start=1)],
        })
    return out


def matching(summaries: Sequence[dict[str, Any]], run: str) -> list[dict[str, Any]]:
    """The runs `run` names: a run name, a run id, or a Ray job id (prefix); 'latest': the newest run."""
    if run == "latest":
        return list(summaries[-1:])
    return [s for s in summaries if run in (s["run"], s["run_id"]) or str(s["job_id"] or "").startswith(run)]


def attempts_of(summaries: Sequence[dict[str, Any]], name: str, job_id: str) -> list[dict[str, Any]]:
    """The attempts of the newest run named `name` in job `job_id` ([] when Train's state does not know it)."""
    same = [s for s in summaries if s["run"] == name and (not job_id or s["job_id"] == job_id)]
    return same[-1]["attempts"] if same else []


def _clock(ts: float | None) -> str:
    return "now     " if ts is None else datetime.datetime.fromtimestamp(ts).strftime("%H:%M:%S")


def _failure(f: dict[str, Any]) -> str:
    where = f.get("node_ip") or "?"
    node = str(f.get("node_id") or "")[:12]
    return f"rank {f['world_rank']} on {where}" + (f" (node {node})" if node else "")


def attempt_line(attempt: dict[str, Any]) -> str:
    """`attempt 1  06:20:01-06:20:09  8.1s  ERRORED  rank 1 on 10.0.0.5 (node 1a2b..): RuntimeError: boom`."""
    took = "" if attempt["duration_s"] is None else f"{attempt['duration_s']:.1f}s"
    line = f"attempt {attempt['number']}  {_clock(attempt['started'])}-{_clock(attempt['ended'])}  {took:>7}  {attempt['status']}"
    if attempt["failed"]:
        line += "  " + ", ".join(_failure(f) for f in attempt["failed"])
    if attempt["error"]:
        line += f": {attempt['error']}"
    return line


def run_lines(summary: dict[str, Any]) -> list[str]:
    """A run's header and one line per attempt (what `raydbg goodput` prints under its table)."""
    head = f"Train run {summary['run']} (id {summary['run_id']}, job {summary['job_id']}): {summary['status']}"
    return [head] + ["  " + attempt_line(a) for a in summary["attempts"]]
