"""Which collective each rank is in (pure): Flight Recorder dumps -> per-rank views -> the run's first disagreement.

A rank's view (`rank_view`, computed inside the rank from torch's Flight Recorder dump,
so that only a few hundred bytes travel) has, per process group, the last collective it
started (entered) and the last one completed, with op, sizes and age, and its newest
entries. With gloo every entry stays `scheduled` and is `retired` once done, so
completion is read from `retired`; with NCCL from `state == "completed"` as well.
Ordering is by `collective_seq_id`, which every member of a group counts the same way.

`disagreement` merges the views of a run: per group, the first sequence id that not every
member has started, the ranks that have not (the culprits the others wait for), the
collective the others wait in; or, where all have started the same id, the ranks whose op
or sizes differ there (a mismatched collective, which hangs just the same).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

RECENT = 8  # entries per group kept in a view: enough to name what the waiting ranks are in
WORLD_GROUP = "default_pg"  # torch's name for the group of every rank
NOT_STARTED: dict[str, Any] = {"started": {"seq": 0, "op": None, "sizes": None}, "completed": None, "recent": []}


def _op(entry: Mapping[str, Any]) -> str:
    name = str(entry.get("profiling_name") or "")
    return name.split(":", 1)[1] if ":" in name else name  # "gloo:all_reduce" -> "all_reduce"


def _brief(entry: Mapping[str, Any], now_ns: int) -> dict[str, Any]:
    created = int(entry.get("time_created_ns") or 0)
    return {"seq": int(entry.get("collective_seq_id") or 0), "op": _op(entry),
            "sizes": entry.get("input_sizes"), "dtypes": entry.get("input_dtypes"),
            "since_s": round(max(0, now_ns - created) / 1e9, 3) if created else None}


def _group_name(entry: Mapping[str, Any]) -> str:
    pg = entry.get("process_group")
    if isinstance(pg, list | tuple) and pg:
        return str(pg[1] if len(pg) > 1 and pg[1] else pg[0])
    return str(entry.get("pg_id", ""))


def _done(entry: Mapping[str, Any]) -> bool:
    return bool(entry.get("retired")) or entry.get("state") == "completed"


def rank_view(dump: Mapping[str, Any], now_ns: int) -> dict[str, Any]:
    """{group name: {"started": brief, "completed": brief|None, "recent": [brief]}} of one rank."""
    by_group: dict[str, list[Mapping[str, Any]]] = {}
    for e in dump.get("entries") or []:
        if not e.get("is_p2p") and int(e.get("collective_seq_id") or 0) > 0:
            by_group.setdefault(_group_name(e), []).append(e)
    out: dict[str, Any] = {}
    for name, entries in by_group.items():
        entries.sort(key=lambda e: int(e.get("collective_seq_id") or 0))
        completed = [e for e in entries if _done(e)]
        out[name] = {"started": _brief(entries[-1], now_ns),
                     "completed": _brief(completed[-1], now_ns) if completed else None,
                     "recent": [_brief(e, now_ns) for e in entries[-RECENT:]]}
    return out


def _signature(brief: Mapping[str, Any]) -> tuple[str, str]:
    return (str(brief.get("op")), repr(brief.get("sizes")))


def disagreement(views: Mapping[int, Mapping[str, Any]]) -> list[dict[str, Any]]:
    """Per process group where the ranks of a run disagree: what, and who is behind.

    `views`: world rank -> rank_view (an empty view: in a group, no collective yet; ranks with
    no view are left out: Flight Recorder off there).
    """
    groups: dict[str, dict[int, Mapping[str, Any]]] = {}
    for rank, view in views.items():
        for name, g in view.items():
            groups.setdefault(name, {})[rank] = g
    world = groups.get(WORLD_GROUP)
    if world is not None:  # every rank is in the world group: one with no entry there has started none
        for rank in views:
            world.setdefault(rank, NOT_STARTED)
    out = []
    for name, members in sorted(groups.items()):
        started = {rank: int(g["started"]["seq"]) for rank, g in members.items()}
        low, high = min(started.values()), max(started.values())
        if low < high:
            first = low + 1
            ahead = sorted(r for r, s in started.items() if s >= first)
            # What the ranks ahead entered at `first` (from their newest entries).
            waited = next((b for r in ahead for b in [members[r]["started"], *(members[r].get("recent") or [])]
                           if b["seq"] == first), None)
            out.append({"group": name, "kind": "not_reached", "seq": first, "collective": waited,
                        "behind": sorted(r for r, s in started.items() if s < first),
                        "waiting": [r for r in ahead if _waits(members[r])],
                        "ahead": ahead})
            continue
        sigs: dict[tuple[str, str], list[int]] = {}
        for rank, g in members.items():
            sigs.setdefault(_signature(g["started"]), []).append(rank)
        if len(sigs) > 1:
            majority = max(sigs.values(), key=len)
            out.append({"group": name, "kind": "mismatch", "seq": high,
                        "collective": members[majority[0]]["started"],
                        "behind": sorted(r for rs in sigs.values() if rs is not majority for r in rs),
                        "waiting": sorted(majority), "ahead": [],
                        "ops": {f"{op} {sizes}": sorted(rs) for (op, sizes), rs in sigs.items()}})
    return out


def _waits(g: Mapping[str, Any]) -> bool:
    """Started a collective that has not completed."""
    done = g.get("completed")
    return done is None or int(done["seq"]) < int(g["started"]["seq"])


def culprits(found: list[dict[str, Any]]) -> list[int]:
    """The ranks the others wait for, over every group."""
    return sorted({r for d in found for r in d["behind"]})


def describe(d: Mapping[str, Any]) -> str:
    """One line: 'rank 2 has not reached all_reduce #2 of group default_pg (ranks 0, 1, 3 wait in it)'."""
    c = d.get("collective") or {}
    what = f"{c.get('op', 'collective')} #{d['seq']} of group {d['group']}"
    behind = ", ".join(map(str, d["behind"]))
    if d["kind"] == "mismatch":
        return f"rank(s) {behind} entered a different collective than the others at {what}: {d.get('ops')}"
    waiting = ", ".join(map(str, d["waiting"])) or "none"
    return f"rank(s) {behind} have not reached {what} (rank(s) {waiting} wait in it)"
