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


def cand_dict(c: Candidate) -> dict[str, Any]:
    return {
        "pid": c.pid,
        "kind": c.kind,
        "name": c.name,
        "memory": c.memory,
        "gpu_memory": c.gpu_memory,
        "growth_bps": int(c.growth),
        "retriable": c.retriable,
        "retries_left": c.retries_left,
        "task_id": c.task_id,
        "actor_id": c.actor_id,
        "job_id": c.job_id,
        "attempt": c.attempt,
        "owner": c.owner,
        "prior_kills": c.prior_kills,
        "expected_peak": c.expected_peak,
        "peak_source": c.peak_source,
    }


def kill_event(
    node_id: str,
    mode: str,
    threshold: float,
    d: Decision,
    node: NodeMemory,
    growth: float,
    top: list[ProcMem],
    c: Candidate,
    reason: str,
    round_id: str,
    reaction: float,
    dry: bool,
    expected: int = 0,
) -> dict[str, Any]:
    """The `memory.kill` (or `memory.dry-run`) event explaining why `c` is the victim.
    `expected`: the most its process or its function's tasks are expected to reach."""
    what = f"{c.kind} {c.name or '?'}"
    left = (
        "unknown"
        if c.retries_left is None
        else ("inf" if c.retries_left < 0 else str(c.retries_left))
    )
    verb = "would kill" if dry else "killed"
    message = (
        f"{verb} {what} (pid {c.pid}, {c.memory / GiB:.2f} GiB, retries left {left}): "
        f"node used {node.used / GiB:.2f} of {node.limit / GiB:.2f} GiB, "
        f"threshold {d.threshold_bytes / GiB:.2f} GiB ({d.trigger}); {reason}"
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
            "trigger": d.trigger,
            "used": node.used,
            "limit": node.limit,
            "fraction": round(node.fraction, 4),
            "source": node.source,
            "cgroup": node.path,
            "psi": node.psi,
            "threshold": threshold,
            "threshold_bytes": d.threshold_bytes,
            "target_bytes": d.target_bytes,
            "need": d.need,
            "growth_bps": int(growth),
            "reaction_s": round(reaction, 4),
            "victim": {
                **cand_dict(c),
                "reason": reason,
                # What its next attempt is expected to need (the gate holds it until
                # that fits): at least what it had, at most what its kind reached.
                "expected_peak": max(c.memory, expected),
            },
            "candidates": [cand_dict(x) for x in d.order[:50]],
            "top_consumers": [
                {"pid": p.pid, "name": p.name, "memory": p.memory, "rss": p.rss} for p in top
            ],
            "decision": d.message,
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
