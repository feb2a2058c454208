"""A Ray Train run that restarts (real Ray, gloo on CPU): rank 1 raises on the first attempt only,
`FailureConfig(max_failures=1)` starts a second that finishes. `raydbg stacks --run` (while the
second attempt runs) and `raydbg goodput` (after) name attempt 1's failed rank, its node and the
error's first line, and attempt 2's status, from Ray Train's state actor. The job's record
(`raydbg history`, and its copy under the run's storage_path) holds the same attempts and still
reads once the cluster is gone."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from e2e import gang_targets, restart_targets
from e2e.conftest import Cluster
from e2e.history_support import history, shown_until

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(600)]

RUN = "restarts-once"


@pytest.fixture(scope="module")
def where(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("history")


@pytest.fixture(scope="module")
def cluster(where: Path) -> Iterator[Cluster]:
    # Train's state actor (the attempts' source) exists only with state tracking on in the driver.
    env = {"RAY_TRAIN_ENABLE_STATE_TRACKING": "1", "RAYDBG_HISTORY": str(where), **gang_targets.TRAIN_CLUSTER_ENV}
    with Cluster(num_cpus=4, env=env, by_value=(restart_targets,)) as c:
        c.up()
        yield c


def _fit(tmp_path: Path) -> tuple[threading.Thread, dict[str, Any]]:
    from ray.train import FailureConfig, RunConfig, ScalingConfig
    from ray.train.torch import TorchConfig, TorchTrainer

    trainer = TorchTrainer(
        restart_targets.fail_once,
        train_loop_config={"marker": str(tmp_path / "failed"), "release": str(tmp_path / "release")},
        torch_config=TorchConfig(backend="gloo"),
        scaling_config=ScalingConfig(num_workers=2, use_gpu=False, resources_per_worker={"CPU": 0.5}),
        run_config=RunConfig(name=RUN, storage_path=str(tmp_path), failure_config=FailureConfig(max_failures=1)),
    )
    out: dict[str, Any] = {}

    def run() -> None:
        try:
            out["result"] = trainer.fit()
        except BaseException as exc:  # the test reports it
            out["error"] = exc

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread, out


def _stacks_until(c: Cluster, ready: Any, timeout: float = 180) -> str:
    """`raydbg stacks --run RUN` until `ready(text)` (the second attempt up, its workers dumped)."""
    deadline, text = time.monotonic() + timeout, ""
    while time.monotonic() < deadline:
        out = c.cli("stacks", "--run", RUN, timeout=90)
        text = out.stdout + out.stderr
        if out.returncode == 0 and ready(text):
            return text
        time.sleep(1.0)
    raise AssertionError(f"`raydbg stacks --run {RUN}` never showed both attempts:\n{text}")


def _line(text: str, part: str) -> str:
    return next((ln for ln in text.splitlines() if part in ln), "")


def test_attempts_in_stacks_and_goodput(cluster: Cluster, tmp_path: Path, where: Path) -> None:
    c = cluster
    node_id = c.head_node_id()
    thread, out = _fit(tmp_path)
    try:
        text = _stacks_until(c, lambda t: "RUNNING" in _line(t, "attempt 2 "))
        print(text)  # shown with -rP: the report a user sees
        line = _line(text, "attempt 1 ")
        assert "ERRORED" in line and "rank 1 on " in line and f"(node {node_id[:12]})" in line, text
        assert line.endswith(f"RuntimeError: {restart_targets.FAILURE}"), text
    finally:
        (tmp_path / "release").write_text("go")
        thread.join(240)
    assert not thread.is_alive() and "error" not in out, out
    assert out["result"].error is None, out["result"].error

    empty = tmp_path / "no-telemetry"  # no spans: goodput prints the attempts alone
    empty.mkdir()
    shown = c.cli("goodput", RUN, "--no-png", "--dir", str(empty), timeout=90)
    assert shown.returncode == 0, shown.stderr
    print(shown.stdout)
    lines = shown.stdout.splitlines()
    assert lines[0].startswith(f"Train run {RUN} ") and lines[0].endswith("FINISHED"), shown.stdout
    assert _line(shown.stdout, "attempt 1 ").endswith(f"RuntimeError: {restart_targets.FAILURE}"), shown.stdout
    assert "FINISHED" in _line(shown.stdout, "attempt 2 "), shown.stdout

    answer = json.loads(c.cli("goodput", RUN, "--no-png", "--dir", str(empty), "--json", timeout=90).stdout)
    (run,) = answer["train_runs"]
    first, second = run["attempts"]
    assert [f["world_rank"] for f in first["failed"]] == [1] and first["failed"][0]["node_id"] == node_id
    assert first["status"] == "ERRORED" and first["error"] == f"RuntimeError: {restart_targets.FAILURE}"
    assert second["status"] == "FINISHED" and second["failed"] == [] and second["ended"] >= second["started"]
    assert first["ended"] <= second["started"]
    # Train's state reached the gateway as plain dicts: its process never loaded torch (a run's
    # settings hold its TorchConfig; unpickled there, it would).
    agents = json.loads(c.cli("status", "--json", timeout=60).stdout)["agents"]
    gateway = next(a for a in agents if a["is_head"])
    assert "libtorch" not in Path(f"/proc/{gateway['pid']}/maps").read_text(), "the gateway imported torch"

    # The job's record: the same attempts, as `raydbg goodput` printed them; then the cluster goes.
    def both_ended(view: dict[str, Any]) -> bool:
        return any(len(r["attempts"]) == 2 and r["attempts"][1]["status"] == "FINISHED" for r in view["train_runs"])

    status = c.cli("status", timeout=60)
    assert f"history: recording to {where} (" in status.stdout, status.stdout + status.stderr
    view = shown_until(RUN, where, both_ended)
    (kept,) = view["train_runs"]
    assert [a["status"] for a in kept["attempts"]] == ["ERRORED", "FINISHED"]
    assert kept["attempts"][0]["error"] == f"RuntimeError: {restart_targets.FAILURE}"
    # A copy beside the run's checkpoints, under its RunConfig(storage_path).
    copied = shown_until(RUN, tmp_path / RUN / "raydbg-history", both_ended)
    assert [a["status"] for a in copied["train_runs"][0]["attempts"]] == ["ERRORED", "FINISHED"]
    c.shutdown()  # the cluster is gone (the fixture's shutdown after this one does nothing more)
    after = history("show", RUN, str(where))
    assert after.returncode == 0, after.stderr
    print(after.stdout)
    assert _line(after.stdout, "attempt 1 ") == _line(shown.stdout, "attempt 1 "), after.stdout
    assert "FINISHED" in _line(after.stdout, "attempt 2 ") and "node " in after.stdout, after.stdout
