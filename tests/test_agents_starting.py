"""The first seconds after an activated job connects: its agents are starting and the gateway is
not listening yet. A client waits for it (bounded) or says they are starting; it says raydbg is
not active only when nothing is starting. The registry runs over a dict (no Ray)."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from doubles import FakeGcs

from raydbg import cli, client, registry
from raydbg.agent_host import lifecycle
from raydbg.api_errors import AgentsStarting

GCS = "10.0.0.9:6379"


@pytest.fixture
def kv(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Iterator[FakeGcs]:
    """One dict for the driver's writes and the client's reads of the cluster at GCS; nothing local."""
    store = FakeGcs()
    registry.use_client(store)
    monkeypatch.setattr(registry, "client_for", lambda address: store if address == GCS else pytest.fail(address))
    monkeypatch.setenv("RAY_ADDRESS", GCS)
    monkeypatch.setenv("HOME", str(tmp_path))  # no gateway index of ours
    monkeypatch.delenv("RAYDBG_GATEWAY", raising=False)
    monkeypatch.setattr(client, "_local_session", lambda: None)
    monkeypatch.setattr(client, "STARTING_POLL_S", 0.02)
    yield store
    registry.use_client(None)


def test_mark_starting_writes_only_while_no_gateway_runs(kv: FakeGcs) -> None:
    assert lifecycle.mark_starting("job 01000000 (pid 1 on h)")
    mark = registry.get(registry.AGENTS_STARTING)
    assert mark is not None and mark["started_by"] == "job 01000000 (pid 1 on h)"
    assert client.starting(mark, time.time()) is not None
    registry.delete(registry.AGENTS_STARTING)
    registry.put(registry.GATEWAY, {"address": "10.0.0.9:8265"})
    assert not lifecycle.mark_starting("job 02000000 (pid 2 on h)")
    assert registry.get(registry.AGENTS_STARTING) is None


def test_a_client_waits_for_a_gateway_that_is_starting(kv: FakeGcs) -> None:
    lifecycle.mark_starting("job 01000000 (pid 1 on h)")
    threading.Timer(0.4, registry.put, (registry.GATEWAY, {"address": "10.0.0.9:8265"})).start()
    started = time.monotonic()
    assert client.find_gateway() == "10.0.0.9:8265"
    assert 0.4 <= time.monotonic() - started < client.STARTING_WAIT_S


def test_agents_still_starting_after_the_wait_say_so_in_one_line(kv: FakeGcs, monkeypatch: pytest.MonkeyPatch,
                                                                 capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setattr(client, "STARTING_WAIT_S", 0.3)
    lifecycle.mark_starting("job 01000000 (pid 1 on h)")
    with pytest.raises(AgentsStarting, match=r"still starting on the cluster at 10\.0\.0\.9:6379 \(job 01000000"):
        client.find_gateway()
    assert cli.main(["break", "add", "train.py:10", "--job", "01000000"]) == 1
    err = capsys.readouterr().err
    assert err.startswith("raydbg: raydbg's agents are still starting") and err.count("\n") == 1, err
    assert "try again in a few seconds" in err and "raydbg up" not in err


def test_nothing_starting_or_a_stale_mark_is_not_active(kv: FakeGcs) -> None:
    with pytest.raises(client.GatewayError, match="not active on the cluster at 10.0.0.9:6379: run `raydbg up`"):
        client.find_gateway()
    registry.put(registry.AGENTS_STARTING, {"since": time.time() - client.STARTING_FRESH_S - 1, "started_by": "x"})
    started = time.monotonic()
    with pytest.raises(client.GatewayError, match="not active"):  # a start that died with its driver
        client.find_gateway()
    assert time.monotonic() - started < 1.0  # not waited for


def test_starting_reads_a_mark_defensively() -> None:
    now = 1000.0
    assert client.starting({"since": 997.0, "started_by": "job 01"}, now) == (3.0, "job 01")
    assert client.starting({"since": 1002.0}, now) == (0.0, "an activated job")  # a clock a little ahead
    for bad in (None, {}, {"since": True}, {"since": "997"}, {"since": now - 61}, {"since": now + 61}):
        assert client.starting(bad, now) is None
