"""Every context a breakpoint can pause in: listed, attached through `raydbg forward`, resumed."""

from __future__ import annotations

import asyncio
import os
import threading
import time
from pathlib import Path
from typing import Any

import pytest
import ray
from cluster import needs_torch

from e2e import targets
from e2e.conftest import (
    attach_and_inspect,
    attach_paused_threads,
    forward,
    gateway,
    list_sessions,
    raydbg_cli,
    wait_for_session,
    wait_gone,
)

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


def test_second_breakpoint_in_same_worker_stops_on_its_own_line(ray_cluster: str, gw: Any) -> None:
    ref = ray.remote(targets.two_breakpoints).remote(1)
    _debug_round(ray_cluster, gw, "first", "first", "2", function="two_breakpoints")
    _debug_round(ray_cluster, gw, "second", "second", "4", function="two_breakpoints")
    assert ray.get(ref, timeout=60) == 4


def test_actor_method(ray_cluster: str, gw: Any) -> None:
    actor = ray.remote(targets.Counter).remote()
    ref = actor.add.remote(5)
    rec = _debug_round(ray_cluster, gw, "actor", "local_value", "15", function="add")
    assert rec["actor_id"] and rec["actor_name"]
    assert ray.get(ref, timeout=60) == 15


def test_async_actor_method(ray_cluster: str, gw: Any) -> None:
    actor = ray.remote(targets.AsyncActor).remote()
    ref = actor.work.remote(1)
    _debug_round(ray_cluster, gw, "async", "local_value", "8", function="work")
    assert ray.get(ref, timeout=60) == 8


def test_threaded_actor_two_calls_are_two_sessions(ray_cluster: str, gw: Any) -> None:
    actor = ray.remote(targets.ThreadedActor).options(max_concurrency=4).remote()
    refs = [actor.work.remote(1), actor.work.remote(2)]
    deadline = time.monotonic() + 90
    recs: list[dict[str, Any]] = []
    while time.monotonic() < deadline and len(recs) < 2:
        recs = [r for r in asyncio.run(gw.sessions()) if r["function"] == "work" and r["attachable"]
                and r["line"] == targets.line_of("threaded")]
        time.sleep(0.1)
    assert len(recs) == 2 and recs[0]["thread_id"] != recs[1]["thread_id"]
    state = asyncio.run(_continue_and_check(ray_cluster, gw, recs[0], refs))
    assert state["other_still_listed"]
    assert sorted(ray.get(refs, timeout=60)) == [101, 102]


async def _continue_and_check(ray_cluster: str, gw: Any, first: dict[str, Any], refs: list[Any]) -> dict[str, Any]:
    """Attach once, continue one paused thread only: its call returns, the other stays paused."""
    with forward(ray_cluster, first["id"]) as port:
        client, paused = await attach_paused_threads(port, targets.line_of("threaded"))
        assert sorted(paused) == [1, 2]
        await client.continue_(paused[1])
        done, _ = await asyncio.get_running_loop().run_in_executor(
            None, lambda: ray.wait(refs, num_returns=1, timeout=30))
        assert done and ray.get(done[0]) == 101
        # The other call is still running (paused), not merely still listed.
        _, pending = await asyncio.get_running_loop().run_in_executor(
            None, lambda: ray.wait(refs, num_returns=2, timeout=1))
        still = [r for r in await gw.sessions() if r["function"] == "work"]
        other_still_listed = pending == [refs[1]] and len(still) == 1
        await client.continue_(paused[2])
        await client.disconnect()
        await client.close()
    return {"other_still_listed": other_still_listed}


def _in_thread(fn: Any) -> tuple[threading.Thread, list[Any]]:
    out: list[Any] = []
    thread = threading.Thread(target=lambda: out.append(fn()), daemon=True)
    thread.start()
    return thread, out


def test_ray_data_function_udf(ray_cluster: str, gw: Any) -> None:
    ds = ray.data.range(8, override_num_blocks=2).map_batches(targets.data_fn, batch_size=4)
    thread, out = _in_thread(lambda: sorted(r["id"] for r in ds.take_all()))
    _debug_round(ray_cluster, gw, "data_fn", "local_value", "4", function="data_fn")
    thread.join(120)
    assert out == [[i * 2 for i in range(8)]]


def test_ray_data_class_udf(ray_cluster: str, gw: Any) -> None:
    ds = ray.data.range(8, override_num_blocks=2).map_batches(targets.DataCls, batch_size=4, concurrency=1)
    thread, out = _in_thread(lambda: sorted(r["id"] for r in ds.take_all()))
    _debug_round(ray_cluster, gw, "data_cls", "local_value", "3", function="__call__")
    thread.join(120)
    assert out == [[i * 3 for i in range(8)]]


def _train_rank0_round(ray_cluster: str, gw: Any, trainer_class: Any, tmp_path: Any) -> None:
    """A 2-rank Train run whose rank 0 pauses: listed with its rank, attached, resumed."""
    from ray.train import RunConfig, ScalingConfig

    trainer = trainer_class(
        targets.train_loop,
        scaling_config=ScalingConfig(num_workers=2, use_gpu=False, resources_per_worker={"CPU": 0.5}),
        run_config=RunConfig(name=f"raydbg-train-bp-{trainer_class.__name__}", storage_path=str(tmp_path)),
    )
    thread, out = _in_thread(trainer.fit)
    rec = _debug_round(ray_cluster, gw, "train", "local_value", "1000", function="train_loop")
    assert rec["train_rank"] == 0
    thread.join(180)
    assert out and out[0].error is None


@needs_torch
def test_ray_train_rank0_breakpoint(ray_cluster: str, gw: Any, tmp_path: Any) -> None:
    from ray.train.torch import TorchTrainer

    _train_rank0_round(ray_cluster, gw, TorchTrainer, tmp_path)


def test_ray_train_rank0_breakpoint_without_torch(ray_cluster: str, gw: Any, tmp_path: Any) -> None:
    """Train V2's generic DataParallelTrainer (no torch backend): a rank's breakpoint on
    every Ray of the version matrix, torch or not."""
    from ray.train.v2.api.data_parallel_trainer import DataParallelTrainer

    _train_rank0_round(ray_cluster, gw, DataParallelTrainer, tmp_path)


def test_post_mortem_in_task(ray_cluster: str, gw: Any) -> None:
    ref = ray.remote(max_retries=0)(targets.failing_task).remote(3)
    rec = wait_for_session(gw, function="failing_task")
    assert rec["reason"] == "exception"
    assert rec["exception"]["type"] == "ValueError" and "bad input 2" in rec["exception"]["message"]
    assert rec["line"] == targets.line_of("raise_task")
    with forward(ray_cluster, rec["id"]) as port:
        seen = asyncio.run(attach_and_inspect(port, "doomed"))
    assert seen["stopped"]["body"]["reason"] == "exception"
    assert seen["top"]["line"] == targets.line_of("raise_task")
    assert seen["value"] == "2"
    with pytest.raises(ValueError, match="bad input 2"):
        ray.get(ref, timeout=60)


def test_a_post_mortem_in_a_library_names_the_users_line(ray_cluster: str, gw: Any) -> None:
    """json raises in the stdlib: the record names the task's own line (what lists show), the
    debugger still holds the whole traceback down to the raising frame."""
    ref = ray.remote(max_retries=0)(targets.failing_in_a_library).remote("{not json")
    rec = wait_for_session(gw, function="failing_in_a_library")
    assert rec["reason"] == "exception" and rec["exception"]["type"] == "JSONDecodeError", rec
    assert (rec["file"], rec["line"]) == (targets.FILE, targets.line_of("raise_in_library")), rec
    with forward(ray_cluster, rec["id"]) as port:
        seen = asyncio.run(attach_and_inspect(port, "idx"))
    assert seen["top"]["source"]["path"].endswith("/json/decoder.py"), seen["top"]
    with pytest.raises(ValueError, match="Expecting property name"):
        ray.get(ref, timeout=60)


def test_post_mortem_in_actor_method(ray_cluster: str, gw: Any) -> None:
    actor = ray.remote(targets.Counter).remote()
    ref = actor.fail.remote(4)
    rec = wait_for_session(gw, function="fail")
    assert rec["exception"]["type"] == "KeyError"
    with forward(ray_cluster, rec["id"]) as port:
        seen = asyncio.run(attach_and_inspect(port, "doomed"))
    assert seen["top"]["line"] == targets.line_of("raise_actor")
    assert seen["value"] == "8"
    with pytest.raises(KeyError):
        ray.get(ref, timeout=60)


def test_wait_timeout_continues_without_a_client(ray_cluster: str, gw: Any) -> None:
    fast = ray.remote(targets.plain_task).options(runtime_env={"env_vars": {"RAYDBG_WAIT_TIMEOUT": "2"}})
    started = time.monotonic()
    ref = fast.remote(1)
    wait_for_session(gw, function="plain_task", attachable=False)
    assert ray.get(ref, timeout=90) == 4
    assert time.monotonic() - started >= 2


def _stderr_file(pid: int) -> str:
    """The worker's stderr log (Ray's worker-*.err), while the worker lives."""
    return os.readlink(f"/proc/{pid}/fd/2")


def test_a_post_mortem_nobody_attaches_to_times_out_and_raises_again(ray_cluster: str, gw: Any) -> None:
    """RAYDBG_WAIT_TIMEOUT with a post-mortem: the task's own exception comes back, with a
    session.timeout event and a line in the worker's log."""
    fast = {"env_vars": {"RAYDBG_WAIT_TIMEOUT": "2"}}
    ref = ray.remote(max_retries=0, runtime_env=fast)(targets.failing_task).remote(7)
    rec = wait_for_session(gw, function="failing_task")
    assert rec["reason"] == "exception" and rec["exception"]["type"] == "ValueError"
    log_file = _stderr_file(rec["pid"])
    with pytest.raises(ray.exceptions.RayTaskError) as raised:
        ray.get(ref, timeout=60)
    assert isinstance(raised.value.as_instanceof_cause(), ValueError) and "bad input" in str(raised.value)
    wait_gone(gw, rec["id"])
    events = asyncio.run(gw.events())
    assert any(e["kind"] == "session.timeout" and e["details"].get("session") == rec["id"] for e in events), events
    text = Path(log_file).read_text(errors="replace")
    assert f"no client attached to session {rec['id']} within 2.0s (RAYDBG_WAIT_TIMEOUT); re-raising" in text


def test_compatibility_mode_listens_on_tcp_and_says_so_loudly(ray_cluster: str, gw: Any) -> None:
    """RAYDBG_COMPAT_BIND_NODE_IP=1: an unauthenticated TCP port on every interface, a warning
    in the worker's log; the relay still attaches."""
    import psutil

    compat = {"env_vars": {"RAYDBG_COMPAT_BIND_NODE_IP": "1"}}
    ref = ray.remote(runtime_env=compat)(targets.plain_task).remote(10)
    rec = wait_for_session(gw, function="plain_task")
    listening = {(c.laddr.ip, c.laddr.port) for c in psutil.Process(rec["pid"]).net_connections("inet")
                 if c.status == psutil.CONN_LISTEN}
    assert any(ip == "0.0.0.0" for ip, _ in listening), listening
    text = Path(_stderr_file(rec["pid"])).read_text(errors="replace")
    assert "raydbg COMPATIBILITY MODE (RAYDBG_COMPAT_BIND_NODE_IP=1)" in text and "WITHOUT authentication" in text
    _debug_round(ray_cluster, gw, "task", "local_value", "30", function="plain_task", id=rec["id"])
    assert ray.get(ref, timeout=60) == 31
