"""`raydbg list | cat` prints every id and value whole; `raydbg forward` takes a unique id prefix,
an ambiguous or unknown one is a one-line error (real cluster, real debugpy, the real CLI)."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from typing import Any

import pytest
import ray
from cluster import Cluster

from e2e import targets
from e2e.conftest import (
    attach_and_inspect,
    forward,
    gateway,
    raydbg_cli,
    wait_for_session,
)
from raydbg.session_ids import IdError, resolve

pytestmark = pytest.mark.e2e

LONG = "preprocess_" + "laion_aesthetic_6plus_shard_" * 4


@pytest.fixture(scope="module")
def cluster() -> Iterator[str]:
    with Cluster(env={"RAYDBG_WAIT_TIMEOUT": "300"}) as running:
        yield running.address


def _shortest_unique(sid: str, ids: list[str]) -> str:
    for n in range(1, len(sid) + 1):
        try:
            if resolve(sid[:n], ids) == sid:
                return sid[:n]
        except IdError:
            continue
    return sid


def _gateway_when_up(address: str, timeout: float = 180) -> Any:
    from raydbg.client import GatewayError

    deadline = time.monotonic() + timeout
    while True:
        try:
            return gateway(address)
        except GatewayError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.5)


def test_list_piped_whole_and_forward_by_prefix(cluster: str) -> None:
    import asyncio

    task = ray.remote(targets.plain_task)
    refs = [task.options(num_cpus=0, name=f"{LONG}00").remote(0)]
    gw = _gateway_when_up(cluster)  # the first pause starts the agents and the gateway
    ids: list[str] = []
    # Pause tasks until two session ids share their first hex digit: an ambiguous prefix
    # needs real ids, and 17 sessions make one certain (16 digits); ~6 are usually enough.
    while True:
        i = len(ids)
        if i == len(refs):
            refs.append(task.options(num_cpus=0, name=f"{LONG}{i:02d}").remote(i))
        rec = wait_for_session(gw, timeout=180, task_name=f"{LONG}{i:02d}")
        ids.append(str(rec["id"]))
        firsts = [s[0] for s in ids]
        shared = next((c for c in firsts if firsts.count(c) > 1), None)
        if shared is not None:
            break
        assert len(ids) <= 16

    out = raydbg_cli(cluster, "list")  # stdout is a pipe here, as with `| cat`
    assert out.returncode == 0, out.stderr
    assert "…" not in out.stdout
    for i, sid in enumerate(ids):
        row = next((x for x in out.stdout.splitlines() if x.startswith(sid + " ")), None)
        assert row is not None, out.stdout
        assert f"{LONG}{i:02d}" in row and "targets.py:" in row

    bad = raydbg_cli(cluster, "forward", shared)
    assert bad.returncode == 1 and bad.stderr.count("\n") == 1, bad.stderr
    assert "ambiguous" in bad.stderr and "Traceback" not in bad.stderr
    assert all(sid in bad.stderr for sid in ids if sid.startswith(shared))
    unknown = raydbg_cli(cluster, "forward", "zzz")
    assert unknown.returncode == 1 and "no paused session matches 'zzz'" in unknown.stderr

    target = ids[0]
    prefix = _shortest_unique(target, ids)
    assert len(prefix) < len(target)
    with forward(cluster, prefix) as port:
        seen = asyncio.run(attach_and_inspect(port, "local_value"))
    assert seen["value"] == "0" and seen["top"]["line"] == targets.line_of("task")
    for sid in ids[1:]:
        done = raydbg_cli(cluster, "continue", sid, "--json")
        assert done.returncode == 0, done.stderr
        assert json.loads(done.stdout)["continued"] == [sid]
    assert ray.get(refs, timeout=120) == [i * 3 + 1 for i in range(len(refs))]
