"""Flight Recorder's entries of this process, dumped in-process (rank side).

Written for torch 2.13.x. Relies on `torch._C._distributed_c10d._dump_fr_trace_json`
(the CPU recorder: gloo) and `_dump_nccl_trace_json` (NCCL's own ring), each called as
`(include_collectives=True, include_stack_traces=True)` and returning JSON bytes with an
`entries` list. A torch without one of them is read without it. The arrival reader's
dumps (`_dump_fr_trace`, `_dump_nccl_trace`, called as `(True, False, False)`: collectives,
no stack traces, all entries) are pickled by torch in this process: builtin types only.
"""

from __future__ import annotations

import json
import pickle
import sys
from typing import Any

C10D_MODULE = "torch._C._distributed_c10d"
_DUMPERS = ("_dump_fr_trace_json", "_dump_nccl_trace_json")  # gloo's ring, then NCCL's


def fr_entries() -> list[dict[str, Any]] | None:
    """Every entry of this process's rings (oldest first per ring); None when torch's
    distributed extension is not loaded. Raises what torch raises (the caller decides)."""
    c10d = sys.modules.get(C10D_MODULE)
    if c10d is None:
        return None
    entries: list[dict[str, Any]] = []
    for name in _DUMPERS:
        dump = getattr(c10d, name, None)
        if dump is not None:
            entries += json.loads(dump(True, True)).get("entries") or []
    return entries


# Without stack traces (the JSON dump's cost is mostly theirs: measured with 2,000 entries ~21 ms
# of CPU against ~35 ms, and the first dump with them symbolizes every frame: over 1 s).
_ARRIVAL_DUMPERS = ("_dump_fr_trace", "_dump_nccl_trace")  # gloo's ring, then NCCL's


def fr_arrival_entries() -> list[dict[str, Any]] | None:
    """Every entry of this process's rings, completed ones included, without stack traces;
    None when torch's distributed extension is not loaded. Raises what torch raises."""
    c10d = sys.modules.get(C10D_MODULE)
    if c10d is None:
        return None
    entries: list[dict[str, Any]] = []
    for name in _ARRIVAL_DUMPERS:
        dump = getattr(c10d, name, None)
        if dump is not None:
            entries += pickle.loads(dump(True, False, False)).get("entries") or []
    return entries
