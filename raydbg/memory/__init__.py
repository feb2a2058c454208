"""Memory monitor: keeps a node out of the kernel's OOM killer by killing the right worker, and holds task starts that would not fit.

The life of a kill, top to bottom (one module each):
  settings.py    every setting, read once; the marks (threshold, high, low)
  node_memory.py node memory as the kernel judges it (cgroup v2/v1, /proc/meminfo, PSI)
  process_memory.py
                 each process's (RssAnon, USS); kernel_files.py: where both read; gpu.py: NVML
  worker_tasks.py
                 pid -> task or actor, caller, retry budget, function (Ray + node files)
  learn.py       what each function's tasks reach on this node (the one table of peaks)
  policy.py      pure: snapshot -> victims, each with its reason
  monitor.py     the loop: measure, decide, kill (killer.py: the right process), record
  events.py      the kill event that explains each victim; the monitor's metrics
  start_gate.py  worker side: hold a task's start until the memory it will need fits
  node_files.py  the files the workers and the monitor share on a node
  budgets.py     retry budgets and kill records in GCS KV
  service.py     the monitor's own process, started by the node agent

Entry points (lazy: importing this package imports neither Ray nor the modules below):
  spawn(gcs_address, node_id)   the agent starts the monitor process (service.py)
  worker_setup()                the worker setup hook (budgets + start gate)
  driver_setup()                the driver (budgets of submitted tasks)
"""

from __future__ import annotations

import importlib
from typing import Any

_ENTRY = {
    "spawn": ("service", "spawn"),
    "worker_setup": ("start_gate", "worker_setup"),
    "driver_setup": ("start_gate", "driver_setup"),
    "MemoryMonitor": ("monitor", "MemoryMonitor"),
    "decide": ("policy", "decide"),
}

__all__ = sorted(_ENTRY)


def __getattr__(name: str) -> Any:
    if name not in _ENTRY:
        raise AttributeError(name)
    module, attr = _ENTRY[name]
    return getattr(importlib.import_module(f"raydbg.memory.{module}"), attr)
