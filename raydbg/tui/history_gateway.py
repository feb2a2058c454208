"""A job's record as the TUI's gateway: `raydbg tui --history PATH|URI` shows it read-only (runs in the CLI; no Ray).

The events pane lists the record's events (enter: a hang's chain and classes, a kill's
explanation), the cluster pane its nodes with their last memory; nothing is live: no
session to attach, no stacks to take, nothing to pause (each says so in one line).
"""

from __future__ import annotations

from typing import Any

from raydbg.client import GatewayError
from raydbg.dap.framing import ByteReader, ByteWriter

READ_ONLY = "a record is read-only (raydbg history): nothing live to attach, take or pause"


class HistoryGateway:
    def __init__(self, view: dict[str, Any]) -> None:
        self.view = view
        self.address = f"history of job {view['job_id']} ({view.get('where')})"

    async def sessions(self) -> list[dict[str, Any]]:
        return []

    async def session(self, sid: str) -> dict[str, Any]:
        raise GatewayError(READ_ONLY)

    async def nodes(self) -> list[dict[str, Any]]:
        out = []
        for node in self.view["nodes"]:
            samples = self.view["memory"].get(node.get("node_id")) or []
            memory = {"used": samples[-1][1], "limit": samples[-1][2]} if samples else None
            out.append(dict(node, memory=memory))
        return out

    async def events(self, limit: int = 100) -> list[dict[str, Any]]:
        return list(reversed(self.view["events"]))[:limit]  # newest first, as the gateway answers

    async def steps(self, job: str | None = None, run: str | None = None) -> dict[str, Any]:
        return {"runs": [], "errors": []}

    async def stacks(self, job: str | None = None, run: str | None = None) -> dict[str, Any]:
        raise GatewayError(READ_ONLY + "; a hang event's details hold its stacks")

    async def pause(self, target: str, job: str | None = None, wait_s: float = 5.0) -> dict[str, Any]:
        raise GatewayError(READ_ONLY)

    async def breakpoints(self) -> list[dict[str, Any]]:
        return []

    async def remove_breakpoint(self, bid: str) -> None:
        raise GatewayError(READ_ONLY)

    async def connect_dap(self, sid: str) -> tuple[ByteReader, ByteWriter]:
        raise GatewayError(READ_ONLY)
