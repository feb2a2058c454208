"""Armed breakpoints as TUI rows, grouped by job (pure: no Textual, no I/O).

A breakpoint is the gateway's record (`GET /api/v1/breakpoints`): id, file, line, job
(None: every job), condition, hit_limit, owner, created, hits, paused.
"""

from __future__ import annotations

import os
from typing import Any

from raydbg.tui.format import truncate

BREAKPOINT_COLUMNS = ("job", "id", "where", "condition", "hits", "paused", "owner")
EVERY_JOB = "every job"


def job_key(bp: dict[str, Any]) -> str:
    """The job a breakpoint is armed for, as shown; None on the wire means every job."""
    job = bp.get("job")
    return str(job) if job else EVERY_JOB


def ordered(bps: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Every-job breakpoints first, then by job id; within a job by file and line."""
    unique = {str(b.get("id")): b for b in bps if b.get("id") is not None}
    return sorted(unique.values(), key=lambda b: (
        job_key(b) != EVERY_JOB, job_key(b), str(b.get("file", "")), _int(b.get("line")), str(b.get("id"))))


def _int(v: Any) -> int:
    return v if isinstance(v, int) else 0


def where(bp: dict[str, Any]) -> str:
    return f"{os.path.basename(str(bp.get('file', '')))}:{bp.get('line', '?')}"


def paused_text(bp: dict[str, Any]) -> str:
    """'1/3': paused now out of the hit limit (pauses at once per breakpoint)."""
    limit = bp.get("hit_limit")
    paused = _int(bp.get("paused"))
    return f"{paused}/{limit}" if isinstance(limit, int) and limit > 0 else str(paused)


def condition_cell(bp: dict[str, Any]) -> str:
    """The condition, and what went wrong arming the breakpoint when something did."""
    cond = str(bp.get("condition") or "")
    if bp.get("error"):
        cond = f"⚠ {bp['error']}" + (f" ({cond})" if cond else "")
    return truncate(cond, 30)


def breakpoint_rows(bps: list[dict[str, Any]]) -> list[tuple[str, tuple[str, ...]]]:
    """(id, cells) per breakpoint; the job cell only on its group's first row, so jobs read as groups."""
    rows: list[tuple[str, tuple[str, ...]]] = []
    last: str | None = None
    for bp in ordered(bps):
        job = job_key(bp)
        rows.append((str(bp["id"]), (
            job if job != last else "",
            str(bp["id"]),
            where(bp),
            condition_cell(bp),
            str(_int(bp.get("hits"))),
            paused_text(bp),
            truncate(str(bp.get("owner") or ""), 24),
        )))
        last = job
    return rows


def same_job(bps: list[dict[str, Any]], bid: str) -> list[str]:
    """Ids of every breakpoint armed for the job of breakpoint ``bid`` (that one included)."""
    chosen = next((b for b in bps if str(b.get("id")) == bid), None)
    if chosen is None:
        return []
    job = job_key(chosen)
    return [str(b["id"]) for b in ordered(bps) if job_key(b) == job]


def summary(bps: list[dict[str, Any]]) -> str:
    """'4 armed in 2 jobs · 7 hits · 1 paused' for the status line."""
    jobs = {job_key(b) for b in bps}
    hits = sum(_int(b.get("hits")) for b in bps)
    paused = sum(_int(b.get("paused")) for b in bps)
    groups = f"{len(jobs)} job{'' if len(jobs) == 1 else 's'}"
    return f"{len(bps)} armed in {groups} · {hits} hits · {paused} paused"
