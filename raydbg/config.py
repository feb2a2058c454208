"""Reads raydbg's settings from the environment (RAY_DEBUG*, RAYDBG_*)."""

from __future__ import annotations

import importlib
import os
from typing import Any

NAMESPACE = "raydbg"
# Settings raydbg carries from the driver to every worker of the job.
CARRIED_PREFIXES = ("RAYDBG_", "OTEL_")
CARRIED_NAMES = ("RAY_DEBUG", "RAY_DEBUG_POST_MORTEM")
# A client attaching to a session listed a moment before its debugger listens ("starting") is
# held this long, not refused: debugpy's adapter start takes seconds on a loaded node (3.5 s
# late plus its start passed the 5 s this was before, at load 10-17).
ATTACHABLE_WAIT_S = 15.0


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


def agent_name(node_id: str) -> str:
    """The name of `node_id`'s agent actor in NAMESPACE (one agent per node)."""
    return f"raydbg-agent-{node_id}"


AGENTS_MODES = ("auto", "off")


def agents_mode() -> str:
    """RAYDBG_AGENTS: `auto` (an activated job starts the node agents and the gateway) or
    `off` (an operator runs them with `raydbg up`); anything else counts as `auto`."""
    return "off" if os.environ.get("RAYDBG_AGENTS", "").strip().lower() == "off" else "auto"


_cli_process = False


def mark_cli_process() -> None:
    """This process is raydbg's own command line: when it connects to Ray (`up`, `down`,
    `status`, ...) it is a client of the cluster, not a job, and starts no agents as a job
    does (`raydbg down` would start again what it stopped). Not an environment variable:
    the commands `raydbg run` starts are jobs."""
    global _cli_process
    _cli_process = True


def is_cli_process() -> bool:
    return _cli_process


def gateway_port() -> int:
    return int(os.environ.get("RAYDBG_GATEWAY_PORT", "0") or 0)


def compat_bind_node_ip() -> bool:
    """Opt-in: debugpy listens on the node IP so Ray's own tooling can attach (unauthenticated)."""
    return os.environ.get("RAYDBG_COMPAT_BIND_NODE_IP", "0") == "1"


# Never carried: a job's runtime_env shows in the dashboard, the state API and every
# worker's environment. Workers that export OTLP to an authenticated collector get the
# headers from the node's environment instead (docs/security.md).
SECRET_NAMES = frozenset({"RAYDBG_TOKEN", "OTEL_EXPORTER_OTLP_HEADERS"})
SECRET_PARTS = ("HEADERS", "TOKEN", "SECRET", "PASSWORD", "PASSWD", "CREDENTIAL", "API_KEY")


def is_secret(name: str) -> bool:
    """RAYDBG_TOKEN, OTEL_EXPORTER_OTLP_[SIGNAL_]HEADERS, and anything named like a secret."""
    upper = name.upper()
    return upper in SECRET_NAMES or any(part in upper for part in SECRET_PARTS)


def is_carried(name: str) -> bool:
    """A setting raydbg hands from the driver to the job's workers (RAYDBG_*, OTEL_*,
    RAY_DEBUG*), never a secret."""
    return (name.startswith(CARRIED_PREFIXES) or name in CARRIED_NAMES) and not is_secret(name)


def carried_env() -> dict[str, str]:
    """The settings to copy to a job's workers (secrets left out)."""
    return {k: v for k, v in os.environ.items() if is_carried(k)}


# How workers of an activated job get raydbg: `auto` (the default) sets them up at their
# first task from the job's settings in the registry, with no job runtime_env (Ray's costs
# ~2 % of a no-op task's throughput, docs/memory.md), where the workers' Python has raydbg's
# .pth; `runtime_env` always adds raydbg's worker_process_setup_hook to the job's runtime_env.
ACTIVATION_MODES = ("auto", "runtime_env")


def worker_activation() -> str:
    """RAYDBG_WORKER_ACTIVATION: `auto` or `runtime_env` (anything else: a warning, `auto`)."""
    raw = os.environ.get("RAYDBG_WORKER_ACTIVATION", "").strip().lower() or "auto"
    if raw not in ACTIVATION_MODES:
        import logging

        logging.getLogger("raydbg").warning(
            "raydbg: RAYDBG_WORKER_ACTIVATION=%r is not one of %s; using auto", raw, "|".join(ACTIVATION_MODES))
        return "auto"
    return raw


def load_object(path: str) -> Any:
    """`package.module.name` -> the object (the format Ray's hook variables use)."""
    module, _, name = path.rpartition(".")
    return getattr(importlib.import_module(module), name)
