"""Flight Recorder's entries of this process, dumped in-process (rank side).

Written for torch 2.13.x. Relies on `torch._C._distributed_c10d._dump_fr_trace_json`
(the CPU recorder: gloo) and `_dump_nccl_trace_json` (NCCL's own ring), each called as
`(include_collectives=True, include_stack_traces=True)` and returning JSON bytes with an
`entries` list. A torch without one of them is read without it.
"""

from __future__ import annotations

import json
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
