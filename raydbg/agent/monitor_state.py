"""What the node agent says about its memory monitor: running | starting | off | failed (+ reason).

Memory protection is never off in silence: the agent's record carries this state
(`raydbg status`: `memory_monitor` per agent), and a failure the monitor could not report itself (it would not
start, died, or went quiet) becomes a `monitor.failed` event, once.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

RUNNING, STARTING, OFF, FAILED = "running", "starting", "off", "failed"

STALE_S = 5.0  # the monitor publishes its status every second
START_GRACE_S = 20.0  # a monitor's imports and its first GCS round trip, on a loaded node


@dataclass
class MonitorWatch:
    """Pure state keeping: the agent feeds it what it sees; `state()` says what to show."""

    off: bool = False  # switched off (RAYDBG_MEMORY_MONITOR=off)
    error: str | None = None  # could not even be spawned
    started: float = field(default_factory=time.time)
    reported: bool = False  # a monitor.failed event went out (by the monitor or by us)

    def state(self, status: dict[str, Any] | None, exit_code: int | None, now: float) -> dict[str, Any]:
        """{"state": running|starting|off|failed, "reason": why (failed only)}.

        `status`: the monitor's own record (memory/<node>); `exit_code`: its process's."""
        state, reason = self._state(status, exit_code, now)
        return {"state": state, "reason": reason} if reason else {"state": state}

    def _state(
        self, status: dict[str, Any] | None, exit_code: int | None, now: float
    ) -> tuple[str, str]:
        if self.off:
            return OFF, ""
        if self.error:
            return FAILED, self.error
        # A record older than this monitor is an earlier one's (an agent restart).
        mine = status if status and float(status.get("ts", 0)) >= self.started - 1 else None
        if mine and mine.get("state") == FAILED:
            self.reported = True  # the monitor recorded the event itself
            return FAILED, str(mine.get("error") or "unknown")
        if mine and now - float(mine.get("ts", 0)) < STALE_S:
            return RUNNING, ""
        if exit_code not in (None, 0):
            return FAILED, f"the monitor exited with code {exit_code} (see raydbg_memory.log)"
        if now - self.started < START_GRACE_S:
            return STARTING, ""
        if mine:
            return FAILED, f"no status from the monitor for {now - float(mine['ts']):.0f}s"
        return FAILED, f"no status from the monitor {now - self.started:.0f}s after it started"

    def needs_event(self, state: dict[str, Any]) -> bool:
        """True once for a failure nobody has recorded as an event yet."""
        if state["state"] != FAILED or self.reported:
            return False
        self.reported = True
        return True
