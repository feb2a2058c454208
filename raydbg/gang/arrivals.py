"""Collective arrival times (pure): whom the ranks wait for at their collectives, step by step, across clocks.

Two halves, one format. In a rank (`summarize`, `encode`; called by
raydbg/gang/arrival_reader.py at its progress beats): the rank's Flight Recorder entries
(`time_created_ns`: when the rank entered the collective, on its own clock), cut into its
recent step windows, become a few hundred bytes of its progress record (`arr`): per step,
its start and end, whether it started at a release every rank shares (a `ray.train.report`
returns at the same moment on every rank), its wait for data and at the sync point that
ended it, and per process group the step's first sequence id, its number of collectives
and the rank's arrival at up to SAMPLED of them (the first, the last and evenly between:
the same sequence ids on every rank). Each step is whole in itself: the steps a rank has
read need not be its newest.

On the gateway (`decode`, `clock_offsets`, `step_waits`): per rank and step, how long it
waited for the others at the step's collectives (`waited_s`: from its arrival to the last
rank's) and how long the others waited for it alone (`late_s`: from the next-latest
rank's arrival to its own), each the largest over the step's sampled collectives.

Clocks: ranks on one node read one clock. Another node's clock may be off by any amount;
its offset is measured from the releases: a release is one instant on every rank, so the
difference between two ranks' readings of the same release is the difference between their
clocks (the median over the releases both recorded, per node, against the lowest rank's
node). A node without releases in common (no `ray.train.report` per step) is taken as in
step with the reference (`unchecked`).
"""

from __future__ import annotations

import functools
import statistics
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

SAMPLED = 4  # arrivals kept per step and group: the first, the last, evenly between
MAX_GROUPS = 4  # process groups kept per step (the busiest): data x tensor x pipeline fits


@dataclass(frozen=True, slots=True)
class Window:
    """One step of a rank, on its own clock: (start, end]; `released`: it started at a shared release."""

    step: int
    start: float
    end: float
    released: bool


@dataclass(slots=True)
class GroupArrivals:
    first: int  # the step's first sequence id in the group
    count: int  # its collectives in the group this step
    at: dict[int, float] = field(default_factory=dict)  # sampled sequence id -> arrival (own clock, s)


@dataclass(slots=True)
class StepArrivals:
    """One step of a rank: its window (own clock), waits, and arrivals per group."""

    start: float
    end: float
    released: bool
    data_s: float = 0.0  # of the step, waiting for data
    sync_wait_s: float | None = None  # in the sync point that ended it; None: not returned yet
    groups: dict[str, GroupArrivals] = field(default_factory=dict)


@functools.lru_cache(maxsize=1024)
def _picks(count: int, k: int) -> tuple[int, ...]:
    if count <= k:
        return tuple(range(count))
    return tuple(sorted({round(i * (count - 1) / (k - 1)) for i in range(k)}))


def sampled(first: int, count: int, k: int = SAMPLED) -> list[int]:
    """The sequence ids kept of `count` consecutive ones from `first`: all, or the first, the last and evenly between."""
    return [first + i for i in _picks(count, k)]


def _group(entry: Mapping[str, Any]) -> str:
    """The group's name as torch numbers it ("0" the world, then one per group made, in the same order on
    every rank): descriptions repeat ("undefined" for every gloo subgroup)."""
    pg = entry.get("process_group")
    if isinstance(pg, list | tuple) and pg:
        return str(pg[0])
    return str(entry.get("pg_id", ""))


def summarize(entries: Iterable[Mapping[str, Any]], window: Window) -> dict[str, GroupArrivals]:
    """A rank's arrivals in one step window, per group (groups whose sequence ids there are not
    consecutive are left out: entries are missing)."""
    by_group: dict[str, list[tuple[int, float]]] = {}
    for e in entries:
        seq = int(e.get("collective_seq_id") or 0)
        created = int(e.get("time_created_ns") or 0) / 1e9
        if e.get("is_p2p") or seq <= 0 or not window.start < created <= window.end:
            continue
        by_group.setdefault(_group(e), []).append((seq, created))
    out: dict[str, GroupArrivals] = {}
    for name, got in sorted(by_group.items(), key=lambda kv: -len(kv[1]))[:MAX_GROUPS]:
        got.sort()
        first, count = got[0][0], len(got)
        if got[-1][0] - first + 1 != count:
            continue
        when = dict(got)
        out[name] = GroupArrivals(first, count, {seq: when[seq] for seq in sampled(first, count)})
    return out


# --- the record's `arr`: [[step, start_ms, end_ms, released, data_ms, sync_ms|null,
# [[group, first, count, [t_ms...]]...]]...], times in ms before the record's `ts`, durations
# in ms (small integers; 1 ms is far below a straggler's lag).
def _ms(t: float, now: float = 0.0) -> int:
    return round((t - now) * 1000)


def encode(steps: Mapping[int, StepArrivals], now: float) -> list[Any]:
    out: list[Any] = []
    for k, s in sorted(steps.items()):
        out.append([k, _ms(s.start, now), _ms(s.end, now), int(s.released), _ms(s.data_s),
                    None if s.sync_wait_s is None else _ms(s.sync_wait_s),
                    [[name, g.first, g.count, [_ms(g.at[q], now) for q in sorted(g.at)]] for name, g in s.groups.items()]])
    return out


def step_numbers(rec: Mapping[str, Any]) -> list[int] | None:
    """The steps a record has arrivals for, without decoding them; None when it carries none."""
    raw = rec.get("arr")
    if not isinstance(raw, list):
        return None
    try:
        return [int(one[0]) for one in raw]
    except (TypeError, ValueError, IndexError):
        return None


def decode(rec: Mapping[str, Any], only: set[int] | None = None) -> dict[int, StepArrivals] | None:
    """A record's arrivals by step (own clock, s), of the steps `only` if given; None when it carries
    none (Flight Recorder off, not in a torch group) or they are malformed."""
    raw, ts = rec.get("arr"), rec.get("ts")
    if not isinstance(raw, list) or not isinstance(ts, int | float):
        return None
    out: dict[int, StepArrivals] = {}
    try:
        for step, start, end, released, data, sync, groups in raw:
            if only is not None and step not in only:
                continue
            one = StepArrivals(ts + start / 1000, ts + end / 1000, bool(released), data / 1000,
                               None if sync is None else sync / 1000)
            for name, first, count, times in groups:
                picks = _picks(count, SAMPLED)
                if len(picks) != len(times):
                    raise ValueError("sampled arrivals do not match their count")
                one.groups[str(name)] = GroupArrivals(first, count, {first + i: ts + t / 1000
                                                                     for i, t in zip(picks, times, strict=True)})
            out[int(step)] = one
    except (TypeError, ValueError):
        return None
    return out


# --- the gateway ----------------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class Clock:
    offset_s: float  # this rank's clock minus the reference rank's
    how: str  # "reference" | "same node" | "releases" (measured) | "unchecked" (no release in common)


def clock_offsets(arrivals: Mapping[int, Mapping[int, StepArrivals]], nodes: Mapping[int, Any]) -> dict[int, Clock]:
    """Each rank's clock against the lowest rank's, one offset per node (one clock per node)."""
    if not arrivals:
        return {}
    ref = min(arrivals)
    ref_node = nodes.get(ref)
    ref_releases = {k: s.start for k, s in arrivals[ref].items() if s.released}
    per_node: dict[Any, list[float]] = {}
    for rank, steps in arrivals.items():
        if nodes.get(rank) != ref_node:
            per_node.setdefault(nodes.get(rank), []).extend(
                s.start - ref_releases[k] for k, s in steps.items() if s.released and k in ref_releases)
    by_node = {node: Clock(statistics.median(diffs), "releases") for node, diffs in per_node.items() if diffs}
    same, unchecked = Clock(0.0, "same node"), Clock(0.0, "unchecked")
    out = {}
    for rank in arrivals:
        node = nodes.get(rank)
        if rank == ref:
            out[rank] = Clock(0.0, "reference")
        elif node == ref_node and node is not None:
            out[rank] = same
        else:
            out[rank] = by_node.get(node, unchecked)
    return out


@dataclass(frozen=True, slots=True)
class Waits:
    waited_s: float  # the longest it waited at one of the step's collectives for the last rank there
    late_s: float  # the longest the others waited at one of them for it alone


def step_waits(arrivals: Mapping[int, Mapping[int, StepArrivals]],
               clocks: Mapping[int, Clock]) -> dict[int, dict[int, Waits]]:
    """Per rank and step, its waits at the step's collectives and the others' waits for it; a rank
    with the step but no collective in it: zeros."""
    offset = {rank: c.offset_s for rank, c in clocks.items()}
    steps = {k for per in arrivals.values() for k in per}
    out: dict[int, dict[int, Waits]] = {rank: {} for rank in arrivals}
    zero = Waits(0.0, 0.0)
    for k in steps:
        here = {rank: per[k] for rank, per in arrivals.items() if k in per}
        waited: dict[int, float] = {}
        late: dict[int, float] = {}
        for name in {g for s in here.values() for g in s.groups}:
            ranks = [rank for rank, s in here.items() if name in s.groups]
            groups = [here[rank].groups[name] for rank in ranks]
            if len(ranks) < 2 or len({(g.first, g.count) for g in groups}) != 1:
                continue  # one member, or their windows cut the group's collectives differently
            offsets = [offset.get(rank, 0.0) for rank in ranks]
            most: list[float] | None = None  # per member, its longest wait at the group's collectives
            for seq in groups[0].at:
                at = [g.at[seq] - off for g, off in zip(groups, offsets, strict=True)]
                top = max(at)
                last = at.index(top)
                second = max(at[:last] + at[last + 1:])
                waits = [top - t for t in at]
                most = waits if most is None else list(map(max, most, waits))
                if top - second > late.get(ranks[last], 0.0):
                    late[ranks[last]] = top - second
            for rank, w in zip(ranks, most or [], strict=False):
                if w > waited.get(rank, 0.0):
                    waited[rank] = w
        for rank in here:
            w, lag = waited.get(rank, 0.0), late.get(rank, 0.0)
            out[rank][k] = Waits(w, lag) if w or lag else zero
    return out
