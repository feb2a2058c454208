"""The Ray and Python versions of this client and of every node's agent (`raydbg status`,
`raydbg --version`), and a warning when they differ: a cluster whose nodes run different
Rays or Pythons breaks in ways no single node shows."""

from __future__ import annotations

import platform
from typing import Any

from raydbg import compat

UNKNOWN = "?"  # an agent from before agents recorded their versions


def client_versions() -> tuple[str, str]:
    """(Ray, Python) of this process: the driver's side of the cluster."""
    return compat.ray_version() or "not installed", platform.python_version()


def agent_versions(agent: dict[str, Any]) -> tuple[str, str]:
    return str(agent.get("ray") or UNKNOWN), str(agent.get("python") or UNKNOWN)


def agent_line(agent: dict[str, Any]) -> str:
    ray, python = agent_versions(agent)
    head = " (head)" if agent.get("is_head") else ""
    return f"agent {str(agent.get('node_id', ''))[:12]}{head}: ray {ray}, python {python}"


def mismatch_warning(agents: list[dict[str, Any]]) -> str | None:
    """One line naming what differs between this client and the nodes, or None."""
    ray, python = client_versions()
    seen: dict[str, dict[str, list[str]]] = {"ray": {ray: ["this client"]}, "python": {python: ["this client"]}}
    for agent in agents:
        node = f"node {str(agent.get('node_id', ''))[:12]}"
        for what, version in zip(("ray", "python"), agent_versions(agent), strict=True):
            if version != UNKNOWN:
                seen[what].setdefault(version, []).append(node)
    parts = [f"{what} " + ", ".join(f"{v} ({', '.join(where)})" for v, where in found.items())
             for what, found in seen.items() if len(found) > 1]
    return "warning: versions differ: " + "; ".join(parts) if parts else None


def client_line() -> str:
    ray, python = client_versions()
    return f"this client: ray {ray}, python {python}"


def notes(status: dict[str, Any]) -> list[str]:
    """From a gateway's status: the warning when versions differ, and one line for each
    thing the cluster's Ray lacks of what raydbg would use."""
    warning = mismatch_warning(list(status.get("agents") or []))
    return [*([warning] if warning else []), *(str(x) for x in status.get("ray_missing") or [])]


def lines(status: dict[str, Any]) -> list[str]:
    """`raydbg --version`'s cluster block: this client, each agent, then the notes."""
    return [client_line(), *(agent_line(a) for a in status.get("agents") or []), *notes(status)]
