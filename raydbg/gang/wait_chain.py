"""The wait-for graph as text (pure): one line per hop, outermost first, the culprits' own place last.

`chain` reads raydbg/gang/wait_for.analyze's answer (plain dicts: it travels in the stacks
answer and the hang event): "ranks 0,1 wait in all_reduce #5 (world) for 2,3", "rank 2
waits in all_reduce #3 (group [2,3]) for 3", "rank 3 is in load_batch train.py:88". Alike
hops of sibling groups (every other replica's data-parallel all_reduce) are one line, a
deadlock's cycle and an undecided mismatch their own; at most MAX_CHAIN_LINES hops, then a count.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

MAX_CHAIN_LINES = 16  # a big run's chain: the first hops, then a count (the JSON has them all)


def ranks_text(ranks: Sequence[int]) -> str:
    """[0, 1] -> '0,1'; [0..127] -> '0-127'; every 32nd of 4,096 -> '0,32,...,4064' (128 ranks)."""
    rs = sorted(set(ranks))
    if len(rs) > 2:
        step = rs[1] - rs[0]
        if all(rs[i + 1] - rs[i] == step for i in range(len(rs) - 1)) and (step == 1 or len(rs) > 8):
            return f"{rs[0]}-{rs[-1]}" if step == 1 else f"{rs[0]},{rs[1]},...,{rs[-1]} ({len(rs)} ranks)"
    if len(rs) <= 8:
        return ",".join(map(str, rs))
    return ",".join(map(str, rs[:6])) + f",... ({len(rs)} ranks)"


def _who(ranks: Sequence[int]) -> str:
    return f"{'rank' if len(ranks) == 1 else 'ranks'} {ranks_text(ranks)}"


def _hop_line(h: Mapping[str, Any]) -> str:
    n = len(h["ranks"])
    what = f"{h['op']} #{h['seq']}" if h.get("seq") is not None else str(h["op"])
    note = f" ({h['note']})" if h.get("note") else ""
    return f"{_who(h['ranks'])} {'waits' if n == 1 else 'wait'} in {what} ({h['group_label']}) for {ranks_text(h['on'])}{note}"


def _kind_of_group(label: str) -> str:
    """'group dp [0,32,...]' -> 'group dp': what hops of sibling groups have in common."""
    return label.split(" [", 1)[0]


def _order(found: Mapping[str, Any]) -> list[list[int]]:
    """Hop indices, outermost first (by distance to a culprit or a cycle, longest first), in
    runs of alike hops: the same op and sequence id in sibling groups (the data-parallel
    groups of every other replica), which `chain` says in one line."""
    hops = found["waits"]
    ends = set(found["culprits"]) | {r for d in found["deadlocks"] for r in d["all"]}
    into: dict[int, list[int]] = {}
    for i, h in enumerate(hops):
        for k in h["on"]:
            into.setdefault(k, []).append(i)
    dist: dict[int, int] = dict.fromkeys(ends, 0)
    hop_dist: dict[int, int] = {}
    frontier = sorted(ends)
    while frontier:
        nxt = []
        for k in frontier:
            for i in into.get(k, []):
                if i in hop_dist:
                    continue
                hop_dist[i] = dist[k] + 1
                for r in hops[i]["ranks"]:
                    if r not in dist:
                        dist[r] = dist[k] + 1
                        nxt.append(r)
        frontier = nxt

    def alike(i: int) -> tuple[Any, ...]:
        h = hops[i]
        return (h["kind"], h["op"], h["seq"] or 0, _kind_of_group(h["group_label"]))

    by_kind: dict[tuple[Any, ...], list[int]] = {}
    for i in range(len(hops)):
        by_kind.setdefault(alike(i), []).append(i)
    runs: list[list[int]] = []
    for same in by_kind.values():
        # Three or more, each in its own sibling group, read as one line; hops within one
        # group (a chain of sends) and pairs read better apart.
        siblings = len(same) > 2 and len({hops[i]["group"] for i in same}) == len(same)
        runs += [same] if siblings else [[i] for i in same]
    return sorted(runs, key=lambda run: (-max(hop_dist.get(i, 0) for i in run), min(hops[i]["ranks"][0] for i in run)))


def _hops_line(hops: Sequence[Mapping[str, Any]]) -> str:
    """One line for alike hops in sibling groups: '992 ranks ... wait in all_reduce #9 (32 groups dp) for ...'."""
    if len(hops) == 1:
        return _hop_line(hops[0])
    ranks = sorted(r for h in hops for r in h["ranks"])
    on = sorted({k for h in hops for k in h["on"]})
    h = hops[0]
    what = f"{h['op']} #{h['seq']}" if h.get("seq") is not None else str(h["op"])
    groups = f"{len(hops)} {_kind_of_group(h['group_label']).replace('group', 'groups', 1)}"
    return f"{_who(ranks)} wait in {what} ({groups}) for {ranks_text(on)}"


def chain(found: Mapping[str, Any], where: Callable[[int], str | None]) -> list[str]:
    """One line per hop (alike hops of sibling groups in one), outermost first, then each
    deadlock's cycle and where each culprit is (`where(rank)`: its stack summary, None: no stacks)."""
    runs = _order(found)
    lines = [_hops_line([found["waits"][i] for i in run]) for run in runs[:MAX_CHAIN_LINES]]
    if len(runs) > MAX_CHAIN_LINES:
        lines.append(f"... and {sum(map(len, runs[MAX_CHAIN_LINES:]))} more waits (--json: waits)")
    for d in found["deadlocks"]:
        cycle = " -> ".join(map(str, [*d["ranks"], d["ranks"][0]]))
        lines.append(f"deadlock: ranks {cycle} wait on each other (a cycle: none of them can go on)")
    for m in found["mismatches"]:  # the ones no majority decides (those are hops above)
        if not any(h["kind"] == "mismatch" and h["group"] == m["group"] and h["seq"] == m["seq"] for h in found["waits"]):
            ops = "; ".join(f"{_who(rs)}: {op}" for op, rs in m["ops"].items())
            lines.append(f"mismatch at #{m['seq']} ({m['group_label']}): {ops}")
    by_place: dict[str, list[int]] = {}
    for r in found["culprits"]:
        by_place.setdefault(where(r) or "", []).append(r)
    for place, rs in by_place.items():
        verb = "is" if len(rs) == 1 else "are"
        if not place:
            lines.append(f"{_who(rs)}: no stacks")
        else:  # "rank 3 is in load_batch train.py:88", "rank 0 is paused at breakpoint ..."
            lines.append(f"{_who(rs)} {verb} {'' if place.startswith('paused') else 'in '}{place}")
    return lines
