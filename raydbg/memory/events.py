"""What the monitor reports: the kill event that explains each victim (registry `event/...`,
`raydbg events`), and its OpenTelemetry instruments (node memory, kills by kind, reaction
and recovery times)."""

from __future__ import annotations

import secrets
import time
from typing import Any

from raydbg.memory.node_memory import NodeMemory
from raydbg.memory.policy import Candidate, Decision
from raydbg.memory.process_memory import ProcMem

GiB = 1 << 30


def cand_dict(candidate: Candidate) -> dict[str, Any]:
    return {
        "pid": candidate.pid,
        "kind": candidate.kind,
        "name": candidate.name,
        "memory": candidate.memory,
        "gpu_memory": candidate.gpu_memory,
        "growth_bps": int(candidate.growth),
        "retriable": candidate.retriable,
        "retries_left": candidate.retries_left,
        "task_id": candidate.task_id,
        "actor_id": candidate.actor_id,
        "job_id": candidate.job_id,
        "attempt": candidate.attempt,
        "owner": candidate.owner,
        "prior_kills": candidate.prior_kills,
        "expected_peak": candidate.expected_peak,
        "peak_source": candidate.peak_source,
    }


def kill_event(
    node_id: str,
    mode: str,
    threshold: float,
    decision: Decision,
    node: NodeMemory,
    growth: float,
    top: list[ProcMem],
    candidate: Candidate,
    reason: str,
    round_id: str,
    reaction: float,
    dry: bool,
    expected: int = 0,
) -> dict[str, Any]:
    """The `memory.kill` (or `memory.dry-run`) event explaining why `c` is the victim.
    `expected`: the most its process or its function's tasks are expected to reach."""
    what = f"{candidate.kind} {candidate.name or '?'}"
    left = (
        "unknown"
        if candidate.retries_left is None
        else ("inf" if candidate.retries_left < 0 else str(candidate.retries_left))
    )
    verb = "would kill" if dry else "killed"
    message = (
        f"{verb} {what} (pid {candidate.pid}, {candidate.memory / GiB:.2f} GiB, retries left {left}): "
        f"node used {node.used / GiB:.2f} of {node.limit / GiB:.2f} GiB, "
        f"threshold {decision.threshold_bytes / GiB:.2f} GiB ({decision.trigger}); {reason}"
    )
    return {
        "id": secrets.token_hex(4),
        "ts": time.time(),
        "kind": "memory.kill" if not dry else "memory.dry-run",
        "node_id": node_id,
        "message": message,
        "details": {
            "round": round_id,
            "mode": mode,
            "trigger": decision.trigger,
            "used": node.used,
            "limit": node.limit,
            "fraction": round(node.fraction, 4),
            "source": node.source,
            "cgroup": node.path,
            "psi": node.psi,
            "threshold": threshold,
            "threshold_bytes": decision.threshold_bytes,
            "target_bytes": decision.target_bytes,
            "need": decision.need,
            "growth_bps": int(growth),
            "reaction_s": round(reaction, 4),
            "victim": {
                **cand_dict(candidate),
                "reason": reason,
                # What its next attempt is expected to need (the gate holds it until
                # that fits): at least what it had, at most what its kind reached.
                "expected_peak": max(candidate.memory, expected),
            },
            "candidates": [cand_dict(x) for x in decision.order[:50]],
            "top_consumers": [
                {"pid": p.pid, "name": p.name, "memory": p.memory, "rss": p.rss} for p in top
            ],
            "decision": decision.message,
        },
    }


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
