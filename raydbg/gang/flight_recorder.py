"""This rank's collectives, read in-process from torch's Flight Recorder (worker side; no port, no ptrace).

Called by the worker's stacks thread (raydbg/gang/cooperative_worker.py) when the agent asks for
stacks: if the process is in a torch.distributed group and Flight Recorder is on
(raydbg turns it on in Train workers: raydbg/worker/train.py), its ring is dumped as JSON
(torch 2.13: ~1 ms for 100 entries) and reduced to a small per-group view
(raydbg/gang/collectives.py), which travels with the stacks. With it go the rank's own
process-group table and the peers of its threads blocked in send/recv (`local_groups`),
which the gateway's wait-for graph needs (raydbg/gang/wait_for.py). Torch is never
imported here, and its private names are read only through raydbg/_torch_internals/:
a process that has not imported torch.distributed has no collectives.
"""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Callable
from typing import Any

from raydbg import _torch_internals
from raydbg.gang import collectives


def _recorded(read: Callable[[], list[dict[str, Any]] | None]) -> list[dict[str, Any]] | None:
    """`read()`'s entries when this process is in a torch group with Flight Recorder on; else
    (or when torch raises) None: a stack request or a reader never fails for want of collectives."""
    dist = sys.modules.get("torch.distributed")
    if dist is None or not os.environ.get("TORCH_FR_BUFFER_SIZE"):
        return None
    try:
        return read() if dist.is_initialized() else None
    except Exception:
        return None


def local_view() -> dict[str, Any] | None:
    """{group: {"started", "completed", "recent"}} of this process; None when it is in no torch
    group or Flight Recorder is off."""
    entries = _recorded(_torch_internals.fr_entries)
    if entries is None:
        return None
    return collectives.rank_view({"entries": entries}, time.time_ns())  # {}: in a group, no collective yet


def local_groups() -> dict[str, Any]:
    """`process_groups` (this rank's groups: name -> desc and members) and `p2p_waits` (its
    threads blocked in send/recv, with the peer), each only where known; {} outside torch groups."""
    dist = sys.modules.get("torch.distributed")
    out: dict[str, Any] = {}
    try:
        if dist is None or not dist.is_initialized():
            return out
        groups = _torch_internals.process_groups()
        if groups is not None:
            out["process_groups"] = groups
        waits = _torch_internals.p2p_waits()
        if waits is not None:
            out["p2p_waits"] = waits
    except Exception:
        pass  # a stack request never fails for want of groups
    return out


def entries() -> list[dict[str, Any]] | None:
    """Every entry of this process's rings, completed collectives included and without their stacks:
    the arrival times of raydbg/gang/arrival_reader.py. None when the process is in no torch group
    or Flight Recorder is off."""
    return _recorded(_torch_internals.fr_arrival_entries)
