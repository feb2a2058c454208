"""A real local Ray cluster with raydbg active and its gateway, for the DAP/TUI e2e tests (see cluster.py)."""

from __future__ import annotations

from cluster import ENV, REPO, raydbg_cluster

__all__ = ["ENV", "REPO", "raydbg_cluster"]
