"""Every memory-monitor setting, read from the environment once, and the marks derived from them.

One object (`current()`) for the monitor (monitor.py), the start gate (start_gate.py),
the agent and the activation hooks (the budgets switch), so they never disagree about a
threshold, and one parser for on/off switches (`0`, `off`, `false`, `no` turn a switch
off; anything else, or unset, leaves its default).

Marks, as fractions of the node limit (min-free lowers all of them alike):
  threshold   where the monitor acts (`RAYDBG_MEMORY_THRESHOLD`, or limit - min-free
              when `RAYDBG_MEMORY_MIN_FREE` is stricter)
  high        threshold - margin/2: above it the gate holds fresh task starts
  low         threshold - margin: the kill target, and where held work is admitted
"""

from __future__ import annotations

import os
from dataclasses import dataclass

from raydbg.memory.policy import PolicyConfig, marks

_OFF = frozenset({"0", "off", "false", "no"})


def switch(name: str, default: bool = True) -> bool:
    """An on/off setting: the one parser for every raydbg memory switch."""
    raw = os.environ.get(name, "").strip().lower()
    if not raw:
        return default
    return raw not in _OFF


def number(name: str, default: float) -> float:
    """A float setting; a missing or bad value gives `default`."""
    try:
        return float(os.environ.get(name, "") or default)
    except ValueError:
        return default


@dataclass(frozen=True)
class Settings:
    monitor: str = "on"  # "on", "off" or "dry-run" (RAYDBG_MEMORY_MONITOR)
    budgets: bool = True  # retry budgets + start gate (RAYDBG_MEMORY_BUDGETS)
    learn: bool = True  # learned peaks at the gate (RAYDBG_MEMORY_LEARN)
    policy: PolicyConfig = PolicyConfig()
    refresh_s: float = 0.25
    fast_refresh_s: float = 0.05
    hold_horizon_s: float = 2.0  # trend hold: growth reaches the high mark within this
    max_hold_s: float = 60.0  # no task start is held longer

    @classmethod
    def from_env(cls) -> Settings:
        raw = os.environ.get("RAYDBG_MEMORY_MONITOR", "").strip().lower()
        mode = "dry-run" if raw in ("dry-run", "dryrun") else ("off" if raw in _OFF else "on")
        return cls(
            monitor=mode,
            budgets=switch("RAYDBG_MEMORY_BUDGETS"),
            learn=switch("RAYDBG_MEMORY_LEARN"),
            policy=PolicyConfig(
                threshold=number("RAYDBG_MEMORY_THRESHOLD", 0.9),
                min_free=int(number("RAYDBG_MEMORY_MIN_FREE", 0)),
                margin=number("RAYDBG_MEMORY_MARGIN", 0.05),
                horizon_s=number("RAYDBG_MEMORY_HORIZON_S", 0.5),
                project_s=number("RAYDBG_MEMORY_PROJECT_S", 0.25),
            ),
            refresh_s=number("RAYDBG_MEMORY_REFRESH_S", 0.25),
            fast_refresh_s=number("RAYDBG_MEMORY_FAST_REFRESH_S", 0.05),
            hold_horizon_s=number("RAYDBG_MEMORY_HOLD_HORIZON_S", 2.0),
            max_hold_s=number("RAYDBG_MEMORY_MAX_HOLD_S", 60.0),
        )

    def marks(self, limit: int) -> tuple[int, int]:
        """(low, high) in bytes for a node of `limit` bytes (policy.marks)."""
        return marks(limit, self.policy)


_current: Settings | None = None


def current() -> Settings:
    """This process's settings, read on first use (a worker's environment does not change)."""
    global _current
    if _current is None:
        _current = Settings.from_env()
    return _current


def reload() -> Settings:
    """Read the environment again (tests, and a process that changed it on purpose)."""
    global _current
    _current = Settings.from_env()
    return _current
