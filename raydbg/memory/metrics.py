"""The monitor's OpenTelemetry instruments: node memory, kills by kind, reaction and recovery times."""

from __future__ import annotations

from raydbg.memory.measure import NodeMemory


class Metrics:
    """OpenTelemetry instruments (no-ops until telemetry.setup() ran in this process)."""

    def __init__(self) -> None:
        try:
            from raydbg import telemetry

            self.used = telemetry.gauge("raydbg.memory.node.used", "By", "Node memory used")
            self.limit = telemetry.gauge("raydbg.memory.node.limit", "By", "Node memory limit")
            self.kills = telemetry.counter("raydbg.memory.kills", "{kill}", "Workers killed")
            self.reaction = telemetry.histogram(
                "raydbg.memory.reaction", "s", "Threshold crossing to kill"
            )
            self.recovery = telemetry.histogram(
                "raydbg.memory.recovery", "s", "Threshold crossing to back under it"
            )
            self.ok = True
        except Exception:
            self.ok = False

    def node(self, node: NodeMemory, node_id: str) -> None:
        if self.ok:
            self.used.set(node.used, node_id=node_id)
            self.limit.set(node.limit, node_id=node_id)

    def kill(self, kind: str, dry: bool, reaction: float, node_id: str) -> None:
        if self.ok:
            self.kills.add(1, kind=kind, dry_run=dry, node_id=node_id)
            self.reaction.record(reaction, node_id=node_id)

    def recovered(self, seconds: float, node_id: str) -> None:
        if self.ok:
            self.recovery.record(seconds, node_id=node_id)
