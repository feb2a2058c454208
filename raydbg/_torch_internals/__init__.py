"""torch's private names raydbg reads in a rank's own process, in one package (written for torch 2.13.x).

Where torch releases differ, a module detects what torch has (a missing name gives None,
never an error); nothing here imports torch: a process that has not imported
torch.distributed is in no group, and a read must never load it.

  fr_dump.py   Flight Recorder's in-process dumps: `_dump_fr_trace_json` (gloo/CPU) and
               `_dump_nccl_trace_json` of `torch._C._distributed_c10d`; for arrival times
               the pickled `_dump_fr_trace` / `_dump_nccl_trace` without stack traces
  groups.py    this process's process-group table: `distributed_c10d._world`
               (`pg_group_ranks`, `pg_names`, the default group) and `ProcessGroup.group_desc`
  data_loader.py  each `next()` of a DataLoader iterator, timed: the wait for data
               (`torch.utils.data.dataloader._BaseDataLoaderIter.__next__`)
  p2p.py       which peer a thread blocked in `send`/`recv` waits for: the `src`/`dst`
               (`group_src`/`group_dst`, `group`) locals of distributed_c10d's functions

Everyone else imports this package, not its modules: `from raydbg import _torch_internals`.
tests/test_torch_private_uses.py fails when a module outside it reads a private torch name.
"""

from __future__ import annotations

from raydbg._torch_internals.data_loader import LOADER_MODULE, wrap_loader_next
from raydbg._torch_internals.fr_dump import fr_arrival_entries, fr_entries
from raydbg._torch_internals.groups import process_groups
from raydbg._torch_internals.p2p import p2p_waits

TORCH_VERSIONS_WRITTEN_FOR = ("2.13.0", "2.13.x")

__all__ = ["LOADER_MODULE", "TORCH_VERSIONS_WRITTEN_FOR", "fr_arrival_entries", "fr_entries", "p2p_waits",
           "process_groups", "wrap_loader_next"]
