"""Connecting to Ray: an existing cluster (RAY_ADDRESS / already initialized) or a local one; its size."""

from __future__ import annotations

import os


def ensure_ray(num_cpus: int | None = None, quiet_data: bool = True) -> None:
    """ray.init once. Locally, more logical CPUs than cores (default 8) lets Train workers
    and Data tasks run side by side on a small machine; they share the cores anyway."""
    import ray

    if not ray.is_initialized():
        if os.environ.get("RAY_ADDRESS"):
            ray.init(address=os.environ["RAY_ADDRESS"], log_to_driver=True)
        else:
            cpus = num_cpus or max(8, os.cpu_count() or 1)
            ray.init(num_cpus=cpus, include_dashboard=False, log_to_driver=True)
    if quiet_data:
        from ray.data import DataContext

        # Our own rich progress bar replaces Ray Data's per-operator bars.
        DataContext.get_current().enable_progress_bars = False


def alive_nodes() -> int:
    """Nodes of the connected cluster that are alive (a removed or dead raylet does not count)."""
    import ray

    return sum(1 for node in ray.nodes() if node.get("Alive"))
