"""Which peer each thread of this rank blocked in a point-to-point op waits for (rank side).

Written for torch 2.13.x. Relies on the Python frames of `torch.distributed.distributed_c10d`'s
`send(tensor, dst, group, tag, group_dst)` and `recv(tensor, src, group, tag, group_src)`
(and `isend`/`irecv`, which they call): `dst`/`src` is a global rank, `group_dst`/`group_src`
a rank of `group` (None: the world group); and on `_world.pg_group_ranks` / `pg_names` to
turn a group object into its name and a group rank into a global one. gloo's Flight
Recorder records no point-to-point op, so for gloo the waiting frame is the only place the
peer is written down (NCCL's recorder has them: raydbg/gang/collectives.py reads those).
A `batch_isend_irecv` followed by `work.wait()` leaves no such frame: its peers stay unknown.

Values are taken only when they are exact ints (or None, or a group matched by identity):
reading them runs no user code.
"""

from __future__ import annotations

import sys
import threading
from typing import Any

C10D_PY_MODULE = "torch.distributed.distributed_c10d"
_FILE_SUFFIX = "torch/distributed/distributed_c10d.py"
_OPS = {"send": ("dst", "group_dst"), "recv": ("src", "group_src"),
        "isend": ("dst", "group_dst"), "irecv": ("src", "group_src")}


def _group_of(group: Any, world: Any) -> tuple[str | None, dict[int, int] | None]:
    """(name, {group rank: global rank}) of a ProcessGroup object (None: the world group)."""
    if group is None:
        group = getattr(world, "default_pg", None)
    if group is None:
        return None, None
    name = next((n for pg, n in list(world.pg_names.items()) if pg is group and type(n) is str), None)
    ranks = next((m for pg, m in list(world.pg_group_ranks.items()) if pg is group), None)
    if type(ranks) is not dict:
        return name, None
    to_global = {v: k for k, v in list(ranks.items()) if type(k) is int and type(v) is int}
    return name, to_global


def _wait_of(frame: Any, world: Any) -> dict[str, Any] | None:
    """The innermost send/recv frame of a thread's stack, as {op, peer, group}."""
    while frame is not None:
        code = frame.f_code
        if code.co_name in _OPS and code.co_filename.replace("\\", "/").endswith(_FILE_SUFFIX):
            break
        frame = frame.f_back
    if frame is None:
        return None
    op = frame.f_code.co_name.lstrip("i")  # isend waits as send does
    peer_name, group_peer_name = _OPS[frame.f_code.co_name]
    local = frame.f_locals
    peer, group_peer, group = local.get(peer_name), local.get(group_peer_name), local.get("group")
    name, to_global = _group_of(group, world)
    if type(peer) is not int:
        peer = to_global.get(group_peer) if type(group_peer) is int and to_global is not None else None
    if peer is None:
        return None  # from any source, or not plain ints: no edge
    return {"op": op, "peer": peer, "group": name}


def p2p_waits() -> list[dict[str, Any]] | None:
    """[{op: send|recv, peer: global rank, group: name}] for the threads of this process (the
    caller's left out) inside a send or recv; None when torch.distributed is not loaded."""
    mod = sys.modules.get(C10D_PY_MODULE)
    world = getattr(mod, "_world", None) if mod is not None else None
    if world is None:
        return None
    me = threading.get_ident()
    out = []
    for ident, top in list(sys._current_frames().items()):
        if ident == me:
            continue
        try:
            got = _wait_of(top, world)
        except Exception:
            got = None  # a table changing as it is read: this thread's peer unknown this time
        if got is not None:
            out.append(got)
    return out
