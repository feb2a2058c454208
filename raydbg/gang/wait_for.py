"""The run's wait-for graph (pure): who waits for whom over every process group and send/recv pair.

Inputs, per world rank, are what its stacks thread sends (raydbg/gang/flight_recorder.py):
`collectives`, its Flight Recorder view (raydbg/gang/collectives.py; None: no Flight Recorder
there); `process_groups`, its own process-group table (group name -> description and
members, so a member that never started a collective in a group is still known to be in
it); `p2p_waits`, its threads blocked in `send`/`recv` with their peer (gloo records no
point-to-point op; NCCL's are in the view, under "p2p").

A *wait* (one hop of the graph) is a set of ranks waiting in the same op for a set of
ranks: in a group, the members that entered collective #s and have not completed it wait
for the members that have not started #s (members with no entry in the group count as
at #0); in send/recv, a rank waits for its peer unless the peer is in the matching op.
Where every member entered #s but not the same op or sizes (a *mismatch*), the majority
waits for the others. The *culprits* are the roots: ranks waited for that wait for nobody.
A *cycle* (ranks waiting on each other across groups, or sends and receives in
mismatched order) is a deadlock and has no root: it is reported with its cycle.
raydbg/gang/wait_chain.py says it all in one line per hop, outermost first, the culprits'
own place last: "ranks 0,1 wait in all_reduce #5 (world) for 2,3; rank 2 waits in
all_reduce #3 (group [2,3]) for 3; rank 3 is in load_batch train.py:88".
"""

from __future__ import annotations

import bisect
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from raydbg.gang.collectives import WORLD_DESC
from raydbg.gang.wait_chain import chain, ranks_text

_NO_DESC = ("", "undefined", WORLD_DESC)  # descriptions that say nothing about the group
MAX_GROUP = 1 << 20  # members a table may claim for a group (a bad record must not fill the gateway's memory)


def expand_ranks(spec: Any) -> list[int] | None:
    """A table's members (a list, or {start, step, count}) as a list in group-rank order."""
    if isinstance(spec, dict):
        try:
            start, step, count = int(spec["start"]), int(spec["step"]), int(spec["count"])
        except (KeyError, TypeError, ValueError):
            return None
        return list(range(start, start + step * count, step)) if 0 < count <= MAX_GROUP and step else None
    if isinstance(spec, list) and len(spec) <= MAX_GROUP and all(isinstance(r, int) for r in spec):
        return list(spec)
    return None


@dataclass
class Group:
    name: str
    desc: str | None
    members: list[int]  # global ranks in group-rank order

    @property
    def is_world(self) -> bool:
        return self.desc == WORLD_DESC

    @property
    def label(self) -> str:
        if self.is_world:
            return "world"
        desc = "" if self.desc in _NO_DESC else f"{self.desc} "
        return f"group {desc}[{ranks_text(self.members)}]"


@dataclass
class Wait:
    """One hop: `ranks` wait in `op` (#`seq` of a collective) of `group` for `on`."""

    ranks: list[int]
    group: str | None
    op: str
    seq: int | None
    kind: str  # collective | mismatch | unknown | p2p
    on: list[int]
    note: str = ""
    label: str = ""

    def as_dict(self) -> dict[str, Any]:
        return {"ranks": self.ranks, "group": self.group, "group_label": self.label, "op": self.op,
                "seq": self.seq, "kind": self.kind, "on": self.on, "note": self.note}


@dataclass
class _Inputs:
    views: dict[int, Mapping[str, Any] | None] = field(default_factory=dict)
    tables: dict[int, Mapping[str, Any]] = field(default_factory=dict)
    p2p: dict[int, list[Mapping[str, Any]]] = field(default_factory=dict)
    seen: dict[str, list[int]] = field(default_factory=dict)  # group -> ranks whose view has it
    descs: dict[str, str | None] = field(default_factory=dict)
    waiting: set[str] = field(default_factory=set)  # groups where some rank waits in a collective


def _inputs(ranks: Mapping[int, Mapping[str, Any]]) -> _Inputs:
    out = _Inputs()
    for rank, got in ranks.items():
        view = got.get("collectives")
        view = out.views[rank] = view if isinstance(view, dict) else None
        if isinstance(got.get("process_groups"), dict):
            out.tables[rank] = got["process_groups"]
        if isinstance(got.get("p2p_waits"), list):
            out.p2p[rank] = got["p2p_waits"]
        for name, g in (view or {}).items():
            out.seen.setdefault(name, []).append(rank)
            if name not in out.descs:
                out.descs[name] = g.get("desc") if isinstance(g, dict) else None
            if name not in out.waiting and _waits_in(g):
                out.waiting.add(name)
    return out


def groups_of(ranks: Mapping[int, Mapping[str, Any]], world_size: int | None = None) -> dict[str, Group]:
    """Every group of the run: members from the ranks' own tables; a group seen only in views
    has the ranks that reported it (the world group: every rank)."""
    return _groups(_inputs(ranks), world_size)


def _groups(inp: _Inputs, world_size: int | None) -> dict[str, Group]:
    groups: dict[str, Group] = {}
    for table in inp.tables.values():
        for name, g in table.items():
            if name not in groups and isinstance(g, dict) and (members := expand_ranks(g.get("ranks"))):
                groups[name] = Group(str(name), g.get("desc") if isinstance(g.get("desc"), str) else None, members)
    everyone = list(range(world_size)) if world_size else sorted(inp.views)
    for name, members in inp.seen.items():
        if name not in groups:
            desc = inp.descs.get(name) or (WORLD_DESC if name == WORLD_DESC else None)  # views before group names
            groups[name] = Group(name, desc, everyone if desc == WORLD_DESC else sorted(members))
    return groups


def _seq(brief: Any) -> int:
    """A brief's sequence id; 0 for what is not one (a view from another raydbg, or cut)."""
    try:
        return int(brief["seq"])
    except (KeyError, TypeError, ValueError):
        return 0


def _waits_in(g: Any) -> bool:
    """Started a collective that has not completed."""
    if not isinstance(g, dict):
        return False
    started, done = _seq(g.get("started")), g.get("completed")
    return started > 0 and (done is None or _seq(done) < started)


def _signature(brief: Mapping[str, Any]) -> tuple[str, str]:
    return (str(brief.get("op")), repr(brief.get("sizes")))


def _group_waits(group: Group, inp: _Inputs, ranks_known: set[int]) -> tuple[list[Wait], list[dict[str, Any]]]:
    """The hops of one group, and its mismatches."""
    known: list[int] = []
    unknown: list[int] = []
    for m in group.members:
        (known if inp.views.get(m) is not None else unknown).append(m)
    started: dict[int, int] = {}
    waiting: dict[int, list[int]] = {}
    briefs: dict[int, Mapping[str, Any]] = {}
    for m in known:
        g = inp.views[m].get(group.name)  # type: ignore[union-attr]
        if not isinstance(g, dict):
            started[m] = 0  # in the group (its table says so), no collective there yet
            continue
        started[m] = _seq(g.get("started"))
        briefs[m] = g.get("started") or {}
        if _waits_in(g):
            waiting.setdefault(started[m], []).append(m)
    if not waiting:
        return [], []
    order = sorted(known, key=started.__getitem__)
    seqs = [started[m] for m in order]
    hops: list[Wait] = []
    mismatches: list[dict[str, Any]] = []
    for seq, waiters in sorted(waiting.items()):
        op = str(briefs[waiters[0]].get("op"))
        behind = order[:bisect.bisect_left(seqs, seq)]
        if behind:
            hops.append(Wait(sorted(waiters), group.name, op, seq, "collective", sorted(behind)))
            continue
        at = [m for m in known if started[m] == seq]
        sigs: dict[tuple[str, str], list[int]] = {}
        for m in at:
            sigs.setdefault(_signature(briefs[m]), []).append(m)
        if len(sigs) > 1:
            sizes = sorted(sigs.values(), key=len, reverse=True)
            majority = sizes[0] if len(sizes[0]) > len(sizes[1]) else None
            mismatches.append({"group": group.name, "group_label": group.label, "seq": seq,
                               "ops": {f"{o} {s}": sorted(rs) for (o, s), rs in sigs.items()},
                               "odd": sorted(m for rs in sizes if rs is not majority for m in rs)})
            if majority is not None and set(majority) & set(waiters):
                others = sorted(m for rs in sizes[1:] for m in rs)
                entered = " or ".join(f"{o} {s}" for (o, s), rs in sigs.items() if rs is not majority)
                hops.append(Wait(sorted(set(majority) & set(waiters)), group.name, op, seq, "mismatch", others,
                                 f"which entered {entered} there instead"))
        elif unknown:
            missing = [m for m in unknown if m not in ranks_known]
            note = "no stacks" if len(missing) == len(unknown) else "no Flight Recorder view"
            hops.append(Wait(sorted(waiters), group.name, op, seq, "unknown", sorted(unknown), f"{note} there"))
    return hops, mismatches


def _p2p_hops(inp: _Inputs, groups: Mapping[str, Group]) -> list[Wait]:
    """send/recv waits, from the ranks' frames (gloo) and NCCL's pending entries; a pair in
    matching ops (a send to k while k receives from it) is under way, not a wait."""
    pending: set[tuple[int, str, int, str | None]] = set()  # (rank, op, peer, group)
    for rank, waits in inp.p2p.items():
        for w in waits:
            if isinstance(w, dict) and w.get("op") in ("send", "recv") and isinstance(w.get("peer"), int):
                pending.add((rank, str(w["op"]), int(w["peer"]), w.get("group")))
    for rank, view in inp.views.items():
        for name, g in (view or {}).items():
            group = groups.get(name)
            for p in g.get("p2p") or [] if isinstance(g, dict) else []:
                peer = p.get("peer") if isinstance(p, dict) else None
                if group is not None and isinstance(peer, int) and 0 <= peer < len(group.members):
                    pending.add((rank, str(p.get("op")), group.members[peer], name))
    mirror = {"send": "recv", "recv": "send"}
    ops = {(r, op, peer) for r, op, peer, _ in pending}
    hops: dict[tuple[str, int, str | None], list[int]] = {}
    for rank, op, peer, pg in sorted(pending, key=lambda p: (p[0], p[1], p[2], str(p[3]))):
        if (peer, mirror.get(op, ""), rank) in ops:
            continue  # both ends in it: moving
        hops.setdefault((op, peer, pg), []).append(rank)
    return [Wait(sorted(set(rs)), pg, op, None, "p2p", [peer]) for (op, peer, pg), rs in hops.items()]


def _cycles(hops: Sequence[Wait]) -> list[dict[str, Any]]:
    """Deadlocks: each strongly connected set of ranks (Tarjan, iterative, over ranks and hops)
    as one cycle through it, from its lowest rank."""
    # Only a rank that waits and is waited for can be on a cycle: the rest is left out.
    inner = {r for h in hops for r in h.ranks} & {k for h in hops for k in h.on}
    out_of: dict[Any, list[Any]] = {}
    for i, h in enumerate(hops):
        on = [("r", k) for k in h.on if k in inner]
        if not on:
            continue
        for r in h.ranks:
            if r in inner:
                out_of.setdefault(("r", r), []).append(("h", i))
        out_of[("h", i)] = on
    index: dict[Any, int] = {}
    low: dict[Any, int] = {}
    on_stack: set[Any] = set()
    stack: list[Any] = []
    found: list[list[int]] = []
    for root in list(out_of):
        if root in index:
            continue
        work = [(root, 0)]
        while work:
            node, i = work.pop()
            if i == 0:
                index[node] = low[node] = len(index)
                stack.append(node)
                on_stack.add(node)
            nexts = out_of.get(node, [])
            if i < len(nexts):
                work.append((node, i + 1))
                nxt = nexts[i]
                if nxt not in index:
                    work.append((nxt, 0))
                elif nxt in on_stack:
                    low[node] = min(low[node], index[nxt])
                continue
            if low[node] == index[node]:
                comp = []
                while True:
                    n = stack.pop()
                    on_stack.discard(n)
                    comp.append(n)
                    if n == node:
                        break
                ranks = sorted(n[1] for n in comp if n[0] == "r")
                if len(ranks) > 1:
                    found.append(ranks)
            if work:
                parent = work[-1][0]
                low[parent] = min(low[parent], low[node])
    return [_one_cycle(ranks, hops) for ranks in sorted(found)]


def _one_cycle(ranks: list[int], hops: Sequence[Wait]) -> dict[str, Any]:
    """The shortest cycle from the lowest rank of a strongly connected set, with its hops."""
    inside = set(ranks)
    start = ranks[0]
    came: dict[int, tuple[int, int]] = {}
    frontier = [start]
    by_rank: dict[int, list[int]] = {}
    for i, h in enumerate(hops):
        for r in h.ranks:
            by_rank.setdefault(r, []).append(i)
    while frontier and start not in came:
        nxt = []
        for r in frontier:
            for i in by_rank.get(r, []):
                for k in hops[i].on:
                    if k in inside and k not in came:
                        came[k] = (r, i)
                        nxt.append(k)
        frontier = nxt
    path, via, r = [], [], start
    while True:
        prev, i = came[r]
        path.append(prev)
        via.append(i)
        r = prev
        if r == start:
            break
    return {"ranks": path[::-1], "hops": via[::-1], "all": ranks}


def analyze(ranks: Mapping[int, Mapping[str, Any]], world_size: int | None = None) -> dict[str, Any]:
    """The run's graph: `waits` (hops), `culprits` (roots), `deadlocks` (cycles), `mismatches`,
    `groups` (name -> label). `ranks`: world rank -> {collectives, process_groups, p2p_waits}."""
    inp = _inputs(ranks)
    groups = _groups(inp, world_size)
    hops: list[Wait] = []
    mismatches: list[dict[str, Any]] = []
    known = set(ranks)
    for name in sorted(inp.waiting & set(groups), key=lambda n: (not groups[n].is_world, n)):
        got, odd = _group_waits(groups[name], inp, known)
        hops += got
        mismatches += odd
    hops += _p2p_hops(inp, groups)
    for h in hops:
        h.label = groups[h.group].label if h.group in groups else (f"group {h.group}" if h.group else "point-to-point")
    waiting = {r for h in hops for r in h.ranks}
    waited = {k for h in hops for k in h.on}
    tied = {m for mm in mismatches for m in mm["odd"] if not any(h.kind == "mismatch" and h.group == mm["group"]
                                                                and h.seq == mm["seq"] for h in hops)}
    return {"waits": [h.as_dict() for h in hops],
            "culprits": sorted((waited - waiting) | (tied - waiting)),
            "deadlocks": _cycles(hops),
            "mismatches": mismatches,
            "groups": {name: g.label for name, g in groups.items()}}


def rank_collectives(view: Mapping[str, Any] | None, labels: Mapping[str, str]) -> dict[str, Any] | None:
    """A rank's last started and completed collective per group, with the group's label
    (its view less the recent list)."""
    if view is None:
        return None
    return {name: {"label": labels.get(name, name), "started": g.get("started"), "completed": g.get("completed")}
            for name, g in view.items()}


def run_fields(members: Sequence[dict[str, Any]], world_size: int | None,
               where: Callable[[dict[str, Any]], str]) -> dict[str, Any]:
    """A RunSummary's graph fields from its ranks' WorkerStacks (`where(worker)`: its stack summary)."""
    by_rank = {int(w["world_rank"]): w for w in members}
    found = analyze({r: {k: w.get(k) for k in ("collectives", "process_groups", "p2p_waits")}
                     for r, w in by_rank.items()}, world_size)
    lines = chain(found, lambda r: where(by_rank[r]) if r in by_rank else None)
    return {"collectives_seen": sorted(r for r, w in by_rank.items() if w.get("collectives") is not None),
            **found, "chain": lines}
