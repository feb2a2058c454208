"""Every context a breakpoint can pause in: listed, attached through `raydbg forward`, resumed."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import pytest
import ray

from e2e import targets
from e2e.conftest import attach_and_inspect, forward, gateway, list_sessions, raydbg_cli, wait_for_session, wait_gone

pytestmark = pytest.mark.e2e


@pytest.fixture(scope="module")
def gw(ray_cluster: str) -> Any:
    up = raydbg_cli(ray_cluster, "up")
    assert up.returncode == 0, up.stderr
    assert "gateway" in up.stdout
    return gateway(ray_cluster)


def _debug_round(ray_cluster: str, gw: Any, marker: str, variable: str, expected_value: str,
                 **match: Any) -> dict[str, Any]:
    rec = wait_for_session(gw, function=match.pop("function"), line=targets.line_of(marker), **match)
    assert rec["file"] == targets.FILE
    assert rec["reason"] in ("breakpoint", "exception")
    with forward(ray_cluster, rec["id"]) as port:
        seen = asyncio.run(attach_and_inspect(port, variable))
    assert seen["top"]["line"] == targets.line_of(marker)
    assert seen["top"]["source"]["path"] == targets.FILE
    assert seen["value"] == expected_value
    wait_gone(gw, rec["id"])
    return rec


def test_task_breakpoint_listed_attached_and_resumed(ray_cluster: str, gw: Any) -> None:
    ref = ray.remote(targets.plain_task).remote(5)
    rec = wait_for_session(gw, function="plain_task")
    listed = {r["id"]: r for r in list_sessions(ray_cluster)}
    assert listed[rec["id"]]["line"] == targets.line_of("task")
    assert listed[rec["id"]]["task_name"].endswith("plain_task")
    assert listed[rec["id"]]["reason"] == "breakpoint"
    assert "port" not in listed[rec["id"]]
    _debug_round(ray_cluster, gw, "task", "local_value", "15", function="plain_task")
    assert ray.get(ref, timeout=60) == 16
