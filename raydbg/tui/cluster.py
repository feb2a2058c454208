"""Cluster pane: one row per node with memory bar, GPU memory, workers and agent state."""

from __future__ import annotations

from typing import Any

from textual.widgets import DataTable

from raydbg.tui.format import NODE_COLUMNS, node_row
from raydbg.tui.table_sync import sync_rows


class ClusterPane(DataTable[Any]):
    """Nodes from ``GET /api/v1/nodes``, head first."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(cursor_type="row", zebra_stripes=True, **kwargs)
        # Columns before mount: rows may arrive before on_mount runs.
        for column in NODE_COLUMNS:
            self.add_column(column, key=column)
        self.border_title = "Cluster"
        self._rows: dict[str, tuple[Any, ...]] = {}

    def update_nodes(self, nodes: list[dict[str, Any]]) -> None:
        nodes = sorted(nodes, key=lambda n: (not n.get("is_head"), str(n.get("node_ip", ""))))
        wanted = list({str(n.get("node_id")): node_row(n) for n in nodes}.items())
        self._rows = sync_rows(self, wanted, NODE_COLUMNS, self._rows)
        alive = sum(1 for n in nodes if n.get("alive", True))
        self.border_title = f"Cluster ({alive}/{len(nodes)} nodes alive)"
