"""Which collective each rank is in (pure): a Flight Recorder dump -> the rank's small per-group view.

A rank's view (`rank_view`, computed inside the rank from torch's Flight Recorder dump,
so that only a few hundred bytes travel) has, per process group, the group's description,
the last collective it started (entered) and the last one completed, with op, sizes and
age, its newest entries, and (NCCL, whose recorder keeps them) its point-to-point ops not
completed yet, with their peer. With gloo every entry stays `scheduled` and is `retired`
once done, so completion is read from `retired`; with NCCL from `state == "completed"` as
well. Ordering is by `collective_seq_id`, which every member of a group counts the same way.

Groups are keyed by their name (the first field of an entry's `process_group`: "0" for
the world group, then one per group made, the same on every member), not by their
description: gloo's subgroups are all "undefined" and each DeviceMesh dimension's groups
share one ("mesh_shard"), so descriptions do not tell groups apart. The gateway merges
the views into the run's wait-for graph (raydbg/gang/wait_for.py).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

RECENT = 8  # entries per group kept in a view: enough to name what the waiting ranks are in
WORLD_DESC = "default_pg"  # torch's description of the group of every rank


def not_started() -> dict[str, Any]:
    """A group's view where the rank has started no collective (only point-to-point ops)."""
    return {"started": {"seq": 0, "op": None, "sizes": None}, "completed": None, "recent": []}


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
    if isinstance(pg, list | tuple) and pg and pg[0] not in (None, ""):
        return str(pg[0])
    return str(entry.get("pg_id", ""))


def _group_desc(entry: Mapping[str, Any]) -> str | None:
    pg = entry.get("process_group")
    return str(pg[1]) if isinstance(pg, list | tuple) and len(pg) > 1 and pg[1] else None


def _p2p(entry: Mapping[str, Any], now_ns: int) -> dict[str, Any] | None:
    """A point-to-point entry (NCCL: "nccl:send 0->1", "nccl:recv 1<-0", ranks of the group)
    as {seq, op, peer (a group rank), sizes, since_s}."""
    parts = _op(entry).split(" ")
    try:
        if parts[0] == "send" and len(parts) == 2:
            peer = int(parts[1].split("->")[1])
        elif parts[0] == "recv" and len(parts) == 2:
            peer = int(parts[1].split("<-")[1])
        else:
            return None
    except (IndexError, ValueError):
        return None
    brief = _brief(entry, now_ns)
    return {"seq": int(entry.get("p2p_seq_id") or 0), "op": parts[0], "peer": peer, "sizes": brief["sizes"],
            "since_s": brief["since_s"]}


def _done(entry: Mapping[str, Any]) -> bool:
    return bool(entry.get("retired")) or entry.get("state") == "completed"


def rank_view(dump: Mapping[str, Any], now_ns: int) -> dict[str, Any]:
    """{group name: {"desc", "started": brief, "completed": brief|None, "recent": [brief], "p2p": [..]}}
    of one rank ("p2p": its point-to-point ops not completed, only where there are some)."""
    by_group: dict[str, list[Mapping[str, Any]]] = {}
    p2p: dict[str, list[Mapping[str, Any]]] = {}
    for e in dump.get("entries") or []:
        if e.get("is_p2p"):
            if not _done(e):
                p2p.setdefault(_group_name(e), []).append(e)
        elif int(e.get("collective_seq_id") or 0) > 0:
            by_group.setdefault(_group_name(e), []).append(e)
    out: dict[str, Any] = {}
    for name, entries in by_group.items():
        entries.sort(key=lambda e: int(e.get("collective_seq_id") or 0))
        completed = [e for e in entries if _done(e)]
        out[name] = {"desc": _group_desc(entries[-1]), "started": _brief(entries[-1], now_ns),
                     "completed": _brief(completed[-1], now_ns) if completed else None,
                     "recent": [_brief(e, now_ns) for e in entries[-RECENT:]]}
    for name, entries in p2p.items():
        pending = [b for b in (_p2p(e, now_ns) for e in entries[-RECENT:]) if b is not None]
        if pending:
            g = out.setdefault(name, {"desc": _group_desc(entries[-1]), **not_started()})
            g["p2p"] = pending
    return out
