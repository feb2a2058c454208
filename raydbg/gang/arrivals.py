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

On the gateway (`columns`, `clock_offsets`, `step_waits`): per rank and step, how long it
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


def sampled(first: int, count: int, keep: int = SAMPLED) -> list[int]:
    """The sequence ids kept of `count` consecutive ones from `first`: all, or the first, the last and evenly between."""
    return [first + i for i in _picks(count, keep)]


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
    """The steps a record has arrivals for, without reading them; None when it carries none."""
    raw = rec.get("arr")
    if not isinstance(raw, list):
        return None
    try:
        return [int(one[0]) for one in raw]
    except (TypeError, ValueError, IndexError):
        return None


# --- the gateway ----------------------------------------------------------------------
@dataclass(slots=True)
class StepColumn:
    """One step across the ranks that read it (times on each rank's own clock, s)."""

    busy: dict[int, float] = field(default_factory=dict)  # rank -> from the step's start to its end
    start: dict[int, float] = field(default_factory=dict)  # rank -> the step's start, where it was a release
    sync: dict[int, float | None] = field(default_factory=dict)  # rank -> its wait at the sync point ending it
    data: dict[int, float] = field(default_factory=dict)  # rank -> its wait for data
    # group -> its members here and, per member, the step's first sequence id there, its count, its
    # sampled arrivals as the record has them (ms from its `ts`) and that `ts`
    groups: dict[str, tuple[list[int], list[int], list[int], list[list[int]], list[float]]] = field(
        default_factory=dict)


def columns(records: Mapping[int, Mapping[str, Any]],
            only: set[int] | None = None) -> tuple[dict[int, StepColumn], set[int]]:
    """The records' arrivals by step (of the steps `only` if given), and the ranks whose record
    carries them (a malformed one is left out whole). Column by column: at thousands of ranks,
    an object per rank and step was most of a judgement's cost."""
    cols: dict[int, StepColumn] = {}
    read: set[int] = set()
    for rank, rec in records.items():
        raw, ts = rec.get("arr"), rec.get("ts")
        if not isinstance(raw, list) or not isinstance(ts, int | float):
            continue
        try:
            mine = []
            for step, start, end, released, data, sync, groups in raw:
                if only is not None and step not in only:
                    continue
                kept = []
                for name, first, count, times in groups:
                    if len(_picks(count, SAMPLED)) != len(times) or not isinstance(first, int):
                        raise ValueError("sampled arrivals do not match their count")
                    kept.append((name, first, count, times))
                mine.append((int(step), ts + start / 1000, (end - start) / 1000, bool(released), data / 1000,
                             None if sync is None else sync / 1000, kept))
        except (TypeError, ValueError):
            continue
        read.add(rank)
        for step, begun, busy, released, data, sync, kept in mine:
            col = cols.get(step) or cols.setdefault(step, StepColumn())
            col.busy[rank], col.sync[rank], col.data[rank] = busy, sync, data
            if released:
                col.start[rank] = begun
            for name, first, count, times in kept:
                members = col.groups.get(name) or col.groups.setdefault(name, ([], [], [], [], []))
                members[0].append(rank)
                members[1].append(first)
                members[2].append(count)
                members[3].append(times)
                members[4].append(ts)
    return cols, read


@dataclass(frozen=True, slots=True)
class Clock:
    offset_s: float  # this rank's clock minus the reference rank's
    how: str  # "reference" | "same node" | "releases" (measured) | "unchecked" (no release in common)


def clock_offsets(cols: Mapping[int, StepColumn], read: set[int], nodes: Mapping[int, Any]) -> dict[int, Clock]:
    """Each rank's clock against the lowest rank's, one offset per node (one clock per node)."""
    if not read:
        return {}
    ref = min(read)
    ref_node = nodes.get(ref)
    per_node: dict[Any, list[float]] = {}
    for col in cols.values():
        mark = col.start.get(ref)
        if mark is None:
            continue
        for rank, begun in col.start.items():
            node = nodes.get(rank)
            if node != ref_node:
                per_node.setdefault(node, []).append(begun - mark)
    by_node = {node: Clock(statistics.median(diffs), "releases") for node, diffs in per_node.items()}
    same, unchecked = Clock(0.0, "same node"), Clock(0.0, "unchecked")
    out = {}
    for rank in read:
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


def step_waits(cols: Mapping[int, StepColumn], clocks: Mapping[int, Clock]) -> dict[int, dict[int, Waits]]:
    """Per rank and step, its waits at the step's collectives and the others' waits for it; a rank
    with the step but no collective in it: zeros. (numpy: at thousands of ranks, Python floats
    per rank were most of the cost, their garbage collection included.)"""
    import numpy as np

    offset = {rank: c.offset_s for rank, c in clocks.items()}
    out: dict[int, dict[int, Waits]] = {rank: {} for rank in clocks}
    zero = Waits(0.0, 0.0)
    for k, col in cols.items():
        waited: dict[int, float] = {}
        late: dict[int, float] = {}
        for ranks, firsts, counts, rows, stamps in col.groups.values():
            if len(ranks) < 2 or len(set(firsts)) != 1 or len(set(counts)) != 1:
                continue  # one member, or their windows cut the group's collectives differently
            # arrivals[member, sampled collective], on the reference rank's clock
            base = np.array(stamps) - np.array([offset.get(r, 0.0) for r in ranks])
            at = np.array(rows, dtype=float) / 1000 + base[:, None]
            top = at.max(axis=0)
            most = (top - at).max(axis=1)  # per member, its longest wait at the group's collectives
            lead = top - np.partition(at, -2, axis=0)[-2]  # the last one's lead on the next-latest
            for i, w in zip(ranks, most.tolist(), strict=True):
                if w > waited.get(i, 0.0):
                    waited[i] = w
            for j, lag in zip(at.argmax(axis=0).tolist(), lead.tolist(), strict=True):
                if lag > late.get(ranks[j], 0.0):
                    late[ranks[j]] = lag
        for rank in col.busy:
            w, lag = waited.get(rank, 0.0), late.get(rank, 0.0)
            out.setdefault(rank, {})[k] = Waits(w, lag) if w or lag else zero
    return out
