"""Reads raydbg's settings from the environment (RAY_DEBUG*, RAYDBG_*)."""

from __future__ import annotations

import importlib
import os
from typing import Any

NAMESPACE = "raydbg"
# Settings raydbg carries from the driver to every worker of the job.
CARRIED_PREFIXES = ("RAYDBG_", "OTEL_")
CARRIED_NAMES = ("RAY_DEBUG", "RAY_DEBUG_POST_MORTEM")


def debug_flag() -> str:
    return os.environ.get("RAY_DEBUG", "").strip().lower()


def is_active() -> bool:
    """raydbg owns breakpoint() when RAY_DEBUG is on; unset, `legacy` or RAYDBG_DISABLE=1
    leaves Ray (and its own debugger) alone."""
    if os.environ.get("RAYDBG_DISABLE", "0") == "1":
        return False
    return debug_flag() in ("1", "true", "yes", "on", "raydbg")


def post_mortem_enabled() -> bool:
    return os.environ.get("RAY_DEBUG_POST_MORTEM", "0").strip().lower() in ("1", "true", "yes", "on")


def wait_timeout() -> float | None:
    """Seconds a paused worker waits for a client; None waits for ever."""
    raw = os.environ.get("RAYDBG_WAIT_TIMEOUT", "").strip()
    if not raw:
        return None
    try:
        value = float(raw)
    except ValueError:
        return None
    return value if value > 0 else None


def gateway_port() -> int:
    return int(os.environ.get("RAYDBG_GATEWAY_PORT", "0") or 0)


def compat_bind_node_ip() -> bool:
    """Opt-in: debugpy listens on the node IP so Ray's own tooling can attach (unauthenticated)."""
    return os.environ.get("RAYDBG_COMPAT_BIND_NODE_IP", "0") == "1"


def carried_env() -> dict[str, str]:
    """The settings to copy into a job's runtime_env env_vars."""
    out = {k: v for k, v in os.environ.items() if k.startswith(CARRIED_PREFIXES)}
    for name in CARRIED_NAMES:
        if name in os.environ:
            out[name] = os.environ[name]
    return out


def load_object(path: str) -> Any:
    """`package.module.name` -> the object (the format Ray's hook variables use)."""
    module, _, name = path.rpartition(".")
    return getattr(importlib.import_module(module), name)
