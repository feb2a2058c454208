"""Cluster pane: one row per node with memory bar, GPU memory, workers and agent state."""

from __future__ import annotations

from typing import Any

from raydbg.tui.format import NODE_COLUMNS, node_row
from raydbg.tui.row_table import Row, RowTable, set_border_title


class ClusterPane(RowTable):
    """Nodes from ``GET /api/v1/nodes``, head first."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(NODE_COLUMNS, **kwargs)
        self.border_title = "Cluster"
        self._records: dict[str, dict[str, Any]] = {}

    def update_nodes(self, nodes: list[dict[str, Any]]) -> None:
        nodes = sorted(nodes, key=lambda n: (not n.get("is_head"), str(n.get("node_ip", ""))))
        keyed = {str(n.get("node_id")): n for n in nodes}
        self.set_rows([(key, self._row(key, node)) for key, node in keyed.items()])
        self._records = keyed
        alive = sum(1 for n in nodes if n.get("alive", True))
        set_border_title(self, f"Cluster ({alive}/{len(nodes)} nodes alive)")

    def _row(self, key: str, node: dict[str, Any]) -> Row:
        """The shown row while the node's record is unchanged: most nodes, most polls."""
        if self._records.get(key) == node:
            return self._rows[key]
        return node_row(node)
