"""Goodput of a training run: where its wall time went, computed from its spans (pure).

Every instant of the run's wall time gets exactly one category, by priority, so the
parts add up to the wall time. Span roles come from the `goodput.phase` attribute or
the name's suffix (`.run`, `.setup`, `.step`, `.data_wait`, `.checkpoint.save`,
`.checkpoint.restore`); `train.run.id`, `train.attempt` and `train.step` attributes
tie spans to runs, attempts and steps (a new process for rank 0 is a new attempt) (docs/telemetry.md, "Goodput").
"""

from __future__ import annotations

import heapq
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

# Highest priority first: an instant covered by several roles counts once, as the first.
CATEGORIES = (
    "checkpoint_restore",
    "checkpoint_save",
    "lost_redo",
    "restart",
    "data",
    "compute",
    "startup",
    "idle",
)
LABELS = {
    "startup": "start-up and worker provisioning",
    "data": "data loading / waiting for data",
    "compute": "productive step compute",
    "checkpoint_save": "checkpoint save",
    "checkpoint_restore": "checkpoint restore",
    "lost_redo": "lost to failures: work redone since the last checkpoint",
    "restart": "lost to failures: restart",
    "idle": "idle / unaccounted",
}
_SUFFIXES = (
    (".checkpoint.restore", "checkpoint_restore"),
    (".checkpoint.save", "checkpoint_save"),
    (".checkpoint", "checkpoint_save"),
    (".restore", "checkpoint_restore"),
    (".data_wait", "data"),
    (".step", "step"),
    (".setup", "startup"),
    (".startup", "startup"),
    (".run", "run"),
)
RUN_ATTR = "train.run.id"
# Canonical name first; the short ones are what sd_reference's spans carry.
ATTEMPT_ATTRS = ("train.attempt", "attempt")
STEP_ATTRS = ("train.step", "step")
RANK_ATTR = "ray.train.world_rank"


def phase(span: dict[str, Any]) -> str | None:
    explicit = span.get("attributes", {}).get("goodput.phase")
    if explicit:
        return str(explicit)
    for suffix, role in _SUFFIXES:
        if span["name"].endswith(suffix):
            return role
    return None


@dataclass
class Report:
    run: str
    start: float
    end: float
    parts: dict[str, float]
    segments: list[tuple[float, float, str]]
    attempts: int = 1
    steps: int = 0
    steps_redone: int = 0
    notes: list[str] = field(default_factory=list)

    @property
    def wall(self) -> float:
        return self.end - self.start

    @property
    def goodput(self) -> float:
        return self.parts.get("compute", 0.0) / self.wall if self.wall > 0 else 0.0

    def as_dict(self) -> dict[str, Any]:
        return {
            "run": self.run,
            "start": self.start,
            "end": self.end,
            "wall_s": self.wall,
            "goodput": self.goodput,
            "parts_s": self.parts,
            "attempts": self.attempts,
            "steps": self.steps,
            "steps_redone": self.steps_redone,
            "notes": self.notes,
        }


def run_ids(spans: Iterable[dict[str, Any]]) -> list[str]:
    """Run ids seen, most recent last."""
    last: dict[str, float] = {}
    for s in spans:
        rid = s.get("attributes", {}).get(RUN_ATTR)
        if rid is not None:
            last[str(rid)] = max(last.get(str(rid), 0.0), s["end"])
    return sorted(last, key=last.__getitem__)


def select(spans: Iterable[dict[str, Any]], run: str, rank: int = 0) -> list[dict[str, Any]]:
    """The run's spans (by `train.run.id` or Ray job id) from one Train rank and the driver."""
    out = []
    for s in spans:
        a = s.get("attributes", {})
        if str(a.get(RUN_ATTR, "")) != run and not str(a.get("ray.job_id", "")).startswith(run):
            continue
        r = a.get(RANK_ATTR)
        if r is not None and int(r) != rank:
            continue
        out.append(s)
    return out


def _attr(s: dict[str, Any], names: tuple[str, ...]) -> Any:
    attrs = s.get("attributes", {})
    for n in names:
        if attrs.get(n) is not None:
            return attrs[n]
    return None


def _step_no(s: dict[str, Any]) -> int | None:
    n = _attr(s, STEP_ATTRS)
    return int(n) if n is not None else None


def _attempts(spans: Sequence[dict[str, Any]], steps: Sequence[dict[str, Any]]) -> list[int]:
    """Attempt index per span: `train.attempt`, else the process (a restart is a new process
    for the same rank), else the attempt whose first step started last before the span."""
    explicit = any(_attr(s, ATTEMPT_ATTRS) is not None for s in steps)
    by_pid: dict[Any, float] = {}
    if not explicit:
        for s in steps:
            pid = s.get("resource", {}).get("process.pid")
            by_pid[pid] = min(by_pid.get(pid, s["start"]), s["start"])
    pid_index = {pid: i for i, pid in enumerate(sorted(by_pid, key=by_pid.__getitem__))}
    firsts: dict[int, float] = {}
    for s in steps:
        a = (
            _attr(s, ATTEMPT_ATTRS)
            if explicit
            else pid_index[s.get("resource", {}).get("process.pid")]
        )
        a = int(a or 0)
        firsts[a] = min(firsts.get(a, s["start"]), s["start"])
    order = sorted((t, a) for a, t in firsts.items())
    out = []
    for s in spans:
        a = _attr(s, ATTEMPT_ATTRS)
        if a is None and not explicit:
            a = pid_index.get(s.get("resource", {}).get("process.pid"))
        if a is None:
            a = 0
            for t, att in order:
                if t <= s["start"]:
                    a = att
        out.append(int(a))
    return out


def _sweep(
    start: float, end: float, intervals: list[tuple[float, float, str]]
) -> list[tuple[float, float, str]]:
    """Split [start, end] into segments, each labelled with its highest-priority category."""
    rank = {c: i for i, c in enumerate(CATEGORIES)}
    events: list[tuple[float, int, str]] = []
    for a, b, cat in intervals:
        a, b = max(a, start), min(b, end)
        if b > a:
            events += [(a, 1, cat), (b, -1, cat)]
    events.sort()
    bounds = sorted({start, end, *(t for t, _, _ in events)})
    active = {c: 0 for c in CATEGORIES}
    heap: list[int] = []  # priorities of active categories (lazy deletion)
    segs: list[tuple[float, float, str]] = []
    i = 0
    for lo, hi in zip(bounds, bounds[1:], strict=False):
        while i < len(events) and events[i][0] <= lo:
            _, delta, cat = events[i]
            active[cat] += delta
            if delta > 0:
                heapq.heappush(heap, rank[cat])
            i += 1
        while heap and active[CATEGORIES[heap[0]]] == 0:
            heapq.heappop(heap)
        cat = CATEGORIES[heap[0]] if heap else "idle"
        if segs and segs[-1][2] == cat and segs[-1][1] == lo:
            segs[-1] = (segs[-1][0], hi, cat)
        else:
            segs.append((lo, hi, cat))
    return segs


def compute(spans: Sequence[dict[str, Any]], run: str) -> Report:
    """Goodput report for one run's spans (already selected with `select`)."""
    if not spans:
        raise ValueError(f"no spans for run {run!r}")
    start = min(s["start"] for s in spans)
    end = max(s["end"] for s in spans)
    roles = [phase(s) for s in spans]
    steps = [s for s, p in zip(spans, roles, strict=True) if p == "step"]
    att = _attempts(spans, steps)
    notes: list[str] = []
    firsts: dict[int, float] = {}
    for s, p, a in zip(spans, roles, att, strict=True):
        if p == "step":
            firsts[a] = min(firsts.get(a, s["start"]), s["start"])
    attempts = sorted(firsts, key=firsts.__getitem__)
    intervals: list[tuple[float, float, str]] = []
    for s, p in zip(spans, roles, strict=True):
        cat = {"step": "compute", "data": "data", "startup": "startup"}.get(p or "", p)
        if cat in CATEGORIES:
            intervals.append((s["start"], s["end"], cat))
    if attempts:
        intervals.append((start, firsts[attempts[0]], "startup"))
    else:
        notes.append("no step spans: everything but start-up and checkpoints counts as idle")
    redone = 0
    for prev, nxt in zip(attempts, attempts[1:], strict=False):
        mine = [(s, p) for s, p, a in zip(spans, roles, att, strict=True) if a == prev]
        t_fail = max(s["end"] for s, p in mine if p not in (None, "run"))
        resume = _resume_step(spans, roles, att, prev, nxt)
        kept_end, lost = firsts[prev], 0
        for s, p in mine:
            if p != "step":
                continue
            n = _step_no(s)
            if n is not None and n <= resume:
                kept_end = max(kept_end, s["end"])
            else:
                lost += 1
        # Everything after the last step the next attempt kept is lost, up to the failure.
        intervals.append((kept_end, t_fail, "lost_redo"))
        intervals.append((t_fail, firsts[nxt], "restart"))
        redone += lost
    segs = _sweep(start, end, intervals)
    parts = {c: 0.0 for c in CATEGORIES}
    for lo, hi, cat in segs:
        parts[cat] += hi - lo
    return Report(
        run=run,
        start=start,
        end=end,
        parts=parts,
        segments=segs,
        attempts=max(1, len(attempts)),
        steps=len(steps) - redone,
        steps_redone=redone,
        notes=notes,
    )


def _resume_step(
    spans: Sequence[dict[str, Any]],
    roles: Sequence[str | None],
    att: Sequence[int],
    prev: int,
    nxt: int,
) -> int:
    """The last step of attempt `prev` that attempt `nxt` kept: the step before its first
    step, else its restore's step, else the step of `prev`'s last checkpoint save."""
    rows = list(zip(spans, roles, att, strict=True))
    nums = [n for s, p, a in rows if p == "step" and a == nxt and (n := _step_no(s)) is not None]
    if nums:
        return min(nums) - 1
    restored = [
        n
        for s, p, a in rows
        if p == "checkpoint_restore" and a == nxt and (n := _step_no(s)) is not None
    ]
    if restored:
        return restored[-1]
    saves = sorted(
        (s for s, p, a in rows if p == "checkpoint_save" and a == prev), key=lambda s: s["end"]
    )
    if saves:
        last = saves[-1]
        n = _step_no(last)
        if n is not None:
            return n
        # An unnumbered save holds the last step that ended before it began.
        before = [
            m
            for s, p, a in rows
            if p == "step"
            and a == prev
            and s["end"] <= last["start"]
            and (m := _step_no(s)) is not None
        ]
        if before:
            return max(before)
    return -1


def table(report: Report) -> str:
    """The report as a plain-text table."""
    wall = report.wall or 1.0
    lines = [
        f"run {report.run}: wall {report.wall:.2f} s, goodput {report.goodput:.1%}, "
        f"{report.attempts} attempt(s), {report.steps} steps kept, {report.steps_redone} redone",
        f"{'part':<58} {'seconds':>9} {'share':>7}",
    ]
    for cat in LABELS:  # in report order
        secs = report.parts.get(cat, 0.0)
        lines.append(f"{LABELS[cat]:<58} {secs:>9.2f} {secs / wall:>7.1%}")
    lost = report.parts["lost_redo"] + report.parts["restart"]
    lines.append(f"{'total (= wall time)':<58} {sum(report.parts.values()):>9.2f} {1:>7.1%}")
    lines.append(f"{'of which lost to failures':<58} {lost:>9.2f} {lost / wall:>7.1%}")
    lines.extend(f"note: {n}" for n in report.notes)
    return "\n".join(lines)
