"""This rank's process-group table, read in its own process (rank side): every group it is in.

Written for torch 2.13.x. Relies on `torch.distributed.distributed_c10d._world` (a
`_World`): `pg_group_ranks` ({ProcessGroup: {global rank: group rank}}, every group
created; a group this rank is not in sits under the int key -100, one entry for all of
them) and `pg_names` ({ProcessGroup: name}: the name every member gives the group, the
first field of a Flight Recorder entry's `process_group`), and on
`torch._C._distributed_c10d.ProcessGroup.group_desc` ("default_pg" for the world group;
"undefined" for a `new_group` made without `group_desc`, "mesh_<dim>" for a DeviceMesh
dimension). With gloo, a Flight Recorder dump's `pg_config` is empty: this table is where
membership is known.

Only exact builtin values are kept (ints, strs, dicts); objects are matched by identity,
and `group_desc` is read only on torch's own ProcessGroup class: no user code runs (a
subclass's property or `__hash__` would be user code).
"""

from __future__ import annotations

import sys
from typing import Any

C10D_PY_MODULE = "torch.distributed.distributed_c10d"
C10D_MODULE = "torch._C._distributed_c10d"


def compact_ranks(ranks: list[int]) -> list[int] | dict[str, int]:
    """Global ranks in group-rank order; an arithmetic run as {start, step, count} (a world
    group of 4,096 ranks, or a data-parallel group of every 32nd rank, in a few bytes)."""
    if len(ranks) > 2:
        step = ranks[1] - ranks[0]
        if step and all(ranks[i + 1] - ranks[i] == step for i in range(len(ranks) - 1)):
            return {"start": ranks[0], "step": step, "count": len(ranks)}
    return list(ranks)


def _exact_int_map(m: Any) -> dict[int, int] | None:
    if type(m) is not dict:
        return None
    items = list(m.items())
    if not all(type(k) is int and type(v) is int for k, v in items):
        return None
    return dict(items)


def process_groups() -> dict[str, dict[str, Any]] | None:
    """{group name: {"desc": str | None, "ranks": compact_ranks(...)}} of the groups this rank
    is in; None when torch.distributed is not loaded or has no such table."""
    mod = sys.modules.get(C10D_PY_MODULE)
    if mod is None:
        return None
    world: Any = getattr(mod, "_world", None)
    c10d = sys.modules.get(C10D_MODULE)
    pg_class = getattr(c10d, "ProcessGroup", None)
    try:
        group_ranks = list(world.pg_group_ranks.items())
        names = {id(pg): name for pg, name in list(world.pg_names.items()) if type(name) is str}
    except Exception:
        return None  # an older torch, or the table changed while read: no membership this time
    out: dict[str, dict[str, Any]] = {}
    for pg, members in group_ranks:
        name = names.get(id(pg))
        ranks = _exact_int_map(members)
        if name is None or ranks is None:
            continue  # -100 (groups this rank is not in) or a value that is not plain ints
        desc = None
        if pg_class is not None and type(pg) is pg_class:
            try:
                got = pg.group_desc
                desc = got if type(got) is str else None
            except Exception:
                desc = None
        out[name] = {"desc": desc, "ranks": compact_ranks(sorted(ranks, key=ranks.__getitem__))}
    return out
