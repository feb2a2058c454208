"""sd_reference on two raylets with their own temp dirs and no shared path: every byte goes through a local S3.

One module cluster: a head and a second node, each with room for one 2-CPU worker
(the elastic run) or two 1-CPU workers. The pipeline runs make-data -> preprocess ->
train (a worker on each node, one killed at step 5, resumed) -> export -> sample,
all on S3; the same training on one node, uninterrupted, must give the same
samples, losses and weights; then an elastic run loses a node for good, continues
on one worker and grows back to two when a new node joins.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from cluster import forget_ray_auth_state, without_ray_auto_connect
from s3_server import s3_server
from sd_support import effective_steps, sampler_keys

from e2e.gang_targets import TRAIN_CLUSTER_ENV
from sd_reference import checkpoint, runlog, storage
from sd_reference.cli import main
from sd_reference.errors import UserError

# The module's cluster, data and first runs are set up inside its first tests' time: more than
# the suite's 300 s per test when the 2 shared cores are loaded (measured: 155 s of setup, then
# 145 s for the elastic run alone at load 30-48).
pytestmark = [pytest.mark.e2e, pytest.mark.timeout(900)]
BUCKET = "sd-ref"
DATA, LATENTS, RUNS = f"s3://{BUCKET}/data", f"s3://{BUCKET}/latents", f"s3://{BUCKET}/runs"
NUM = 40
# What Ray Train reads in its controller and workers; they start from this process's environment.
TRAIN_ENV = {
    "RAY_TRAIN_HEALTH_CHECK_INTERVAL_S": "1",
    # After a node dies, Ray Train first retries the old size (the node is not yet known dead)
    # and waits this long for it (60 s by default) before it starts the smaller group.
    "RAY_TRAIN_WORKER_GROUP_START_TIMEOUT_S": "15",
    **TRAIN_CLUSTER_ENV,  # e2e/gang_targets.py says why
}
FAST_NODE_DEATH = {"health_check_period_ms": 1000, "health_check_failure_threshold": 3, "health_check_timeout_ms": 1000}


@pytest.fixture(scope="module")
def nodes() -> Iterator[dict[str, Any]]:
    import ray
    from ray.cluster_utils import Cluster

    if ray.is_initialized():
        ray.shutdown()
    forget_ray_auth_state()  # an earlier module's cluster may have left another auth mode cached
    # Short: a raylet's socket paths under its temp dir must fit in 107 bytes.
    tmp = Path(tempfile.mkdtemp(prefix="sdc-", dir="/tmp"))
    saved = {k: os.environ.get(k) for k in TRAIN_ENV}
    os.environ.update(TRAIN_ENV)
    with s3_server(BUCKET):
        cluster = Cluster(initialize_head=True, head_node_args={
            "num_cpus": 3, "temp_dir": str(tmp / "head"), "_system_config": FAST_NODE_DEATH})
        second = cluster.add_node(num_cpus=3, temp_dir=str(tmp / "second"))
        try:
            ray.init(address=cluster.address)
            yield {"cluster": cluster, "second": second, "tmp": tmp}
        finally:
            with without_ray_auto_connect():
                ray.shutdown()
                cluster.shutdown()
            shutil.rmtree(tmp, ignore_errors=True)
            for k, v in saved.items():
                if v is None:
                    os.environ.pop(k, None)
                else:
                    os.environ[k] = v


@pytest.fixture(scope="module")
def latents(nodes: dict[str, Any]) -> str:
    assert main(["--no-progress", "make-data", "--out", DATA, "--num", str(NUM), "--shards", "2",
                 "--formats", "parquet"]) == 0
    assert main(["--no-progress", "preprocess", "--input", f"{DATA}/laion", "--out", LATENTS,
                 "--cpu-batch-size", "16", "--encode-batch-size", "16", "--rows-per-group", "8"]) == 0
    return LATENTS


def _train(name: str, *extra: str) -> list[str]:
    return ["--no-progress", "train", "--data", LATENTS, "--storage-path", RUNS, "--name", name,
            "--workers", "2", "--steps", "8", "--batch-size", "4", "--checkpoint-every", "2",
            "--fingerprint", "--log-samples", *extra]


def _ranks_nodes(record: dict[str, Any]) -> list[str]:
    return [r["node"] for r in record["ranks"]]


def _registered_step(run: str) -> int:
    """The step a restart of the run resumes from: the newest checkpoint in Ray Train's own
    record of registered checkpoints (Ray 2.60 keeps it in the run's storage); 0 if none yet."""
    snapshot = f"{run}/checkpoint_manager_snapshot.json"
    try:
        latest = json.loads(storage.read_text(snapshot)).get("latest_checkpoint_result") or {}
    except (OSError, ValueError, UserError):  # not written yet; the in-process S3 server slow under load
        return 0
    name = latest.get("checkpoint_dir_name", "")
    return int(name.removeprefix("step_")) if name.startswith("step_") else 0


def _stop_train_runs() -> None:
    """Kill the cluster's Ray Train controllers, so that a run's driver thread returns: one left
    running by a failed test would use Ray after the teardown's ray.shutdown(), and Ray then
    ends the whole process (ci12 lost the failure's report that way)."""
    from ray._private import state

    for actor in state.actors().values():
        if actor["ActorClassName"] == "TrainController" and actor["State"] == "ALIVE" and actor["Pid"]:
            with contextlib.suppress(ProcessLookupError):
                os.kill(actor["Pid"], signal.SIGKILL)


@pytest.fixture(scope="module")
def spread_run(latents: str) -> list[dict[str, Any]]:
    """A worker on each node, rank 1 killed before step 5 (resumes from 4), export and sample, all on S3."""
    assert main(_train("spread", "--placement", "STRICT_SPREAD", "--inject-failure-at-step", "5",
                       "--max-failures", "2")) == 0
    return runlog.read(f"{RUNS}/spread")


def test_a_local_path_is_refused_on_two_nodes(latents: str, nodes: dict[str, Any],
                                               capsys: pytest.CaptureFixture[str]) -> None:
    local = str(nodes["tmp"] / "runs")
    assert main(["--no-progress", "train", "--data", LATENTS, "--storage-path", local, "--steps", "1"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and f"--storage-path {local} is a local path" in err[0] and "2 nodes" in err[0]
    assert not Path(local).exists()  # refused before anything was written


def test_pipeline_on_s3_across_two_nodes(spread_run: list[dict[str, Any]], tmp_path: Path) -> None:
    manifest = json.loads(storage.read_text(f"{LATENTS}/manifest.json"))
    assert manifest["rows"] == NUM and all(max(f["row_groups"]) <= 8 for f in manifest["files"])
    assert manifest["components"]["path"] == f"{LATENTS}/components"  # the encoders live in S3 too
    events = [r for r in spread_run if r.get("event") in ("start", "resume")]
    assert [e["event"] for e in events] == ["start", "resume"] and events[1]["step"] == 4
    assert len(set(_ranks_nodes(events[0]))) == 2  # one worker on each raylet
    run = f"{RUNS}/spread"
    assert [storage.name(c) for c in checkpoint.find(run)][-1] == "step_00000008"
    assert sorted(n for n in storage.list_dir(f"{run}/step_00000008") if n.endswith(".distcp")) == [
        "__0_0.distcp", "__1_0.distcp"]
    assert storage.list_dir(f"{run}/{runlog.PARTS_DIR}")  # S3 cannot append: the log is in parts
    info = json.loads(storage.read_text(f"{run}/pipeline/sd_reference_export.json"))
    assert info["step"] == 8 and info["run_dir"] == run

    samples = f"s3://{BUCKET}/samples"
    assert main(["--no-progress", "sample", "--pipeline", f"{run}/pipeline", "--out", samples, "--steps", "2",
                 "--prompt", "a small green square on a white background"]) == 0
    assert storage.list_dir(samples) == ["00-a-small-green-square-on-a-white-background.png", "loss_curve.png"]
    from PIL import Image

    png = tmp_path / "sample.png"
    png.write_bytes(storage.read_bytes(f"{samples}/00-a-small-green-square-on-a-white-background.png"))
    assert Image.open(png).size == (64, 64)


def test_two_nodes_and_a_failure_give_what_one_node_uninterrupted_gives(spread_run: list[dict[str, Any]]) -> None:
    """Exact resume and node independence: same sample keys per step and rank, same losses, same weights."""
    assert main(_train("packed", "--placement", "STRICT_PACK", "--no-export")) == 0
    packed = runlog.read(f"{RUNS}/packed")
    start = next(r for r in packed if r.get("event") == "start")
    assert len(set(_ranks_nodes(start))) == 1 and not any(r.get("event") == "resume" for r in packed)
    spread_steps, packed_steps = effective_steps(spread_run), effective_steps(packed)
    assert sorted(spread_steps) == sorted(packed_steps) == list(range(1, 9))
    for step in range(1, 9):
        assert spread_steps[step]["samples"] == packed_steps[step]["samples"], f"step {step}"
        assert spread_steps[step]["loss"] == packed_steps[step]["loss"], f"step {step}"
    keys = [k for step in range(1, 5) for rank in packed_steps[step]["samples"] for k in rank]
    assert len(keys) == len(set(keys)) == 32  # one epoch of 40 rows in global batches of 8: no repeats
    final = {r["step"]: r["fingerprint"] for r in spread_run + packed if r.get("event") == "checkpoint"}
    spread_final = checkpoint.read_train_state(f"{RUNS}/spread/step_00000008")["fingerprint"]
    packed_final = checkpoint.read_train_state(f"{RUNS}/packed/step_00000008")["fingerprint"]
    assert spread_final == packed_final == final[8] and set(spread_final) == {"0", "1"}


def test_elastic_run_loses_a_node_and_grows_back(latents: str, nodes: dict[str, Any]) -> None:
    """2 workers; the second node dies for good; the run goes on with 1 worker; a new node joins; 2 again."""
    from sd_reference import train
    from sd_reference.config import TrainConfig

    cluster, tmp = nodes["cluster"], nodes["tmp"]
    steps = 50
    cfg = TrainConfig(data=LATENTS, storage_path=RUNS, name="elastic", workers=2, min_workers=1,
                      cpus_per_worker=2, steps=steps, batch_size=4, checkpoint_every=3, max_failures=3,
                      log_samples=True, min_step_seconds=1.0, resize_check_s=3, export=False)
    records: list[dict[str, Any]] = []
    outcome: dict[str, Any] = {}

    def fit() -> None:
        try:
            outcome["result"] = train.run(cfg, records.append)
        except BaseException as exc:  # noqa: BLE001 - reported by the main thread
            outcome["error"] = exc

    runner = threading.Thread(target=fit, daemon=True)
    runner.start()

    def wait_for(what: str, test: Any, timeout: float = 240) -> dict[str, Any]:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline and runner.is_alive():
            found = next((r for r in list(records) if test(r)), None)
            if found is not None:
                return found
            time.sleep(0.3)
        raise AssertionError(f"no {what} in {timeout}s: {outcome.get('error')!r} {records[-3:]}")

    try:
        start = wait_for("start on 2 workers", lambda r: r.get("event") == "start")
        assert start["world_size"] == 2 and len(set(_ranks_nodes(start))) == 2
        wait_for("step 7", lambda r: r.get("step", 0) >= 7 and r.get("event") is None)
        cluster.remove_node(nodes["second"], allow_graceful=False)  # the node dies for good
        on_one = wait_for("resume on 1 worker", lambda r: r.get("event") == "resume" and r["world_size"] == 1)
        # Added only once Ray Train has registered a checkpoint saved on 1 worker: a resize kills the
        # workers, and with them an upload still in flight (CI: the grown run resumed from on_one's step).
        wait_for("a registered checkpoint on 1 worker", lambda r: r.get("event") == "checkpoint"
                 and r["step"] > on_one["step"] and _registered_step(f"{RUNS}/elastic") >= r["step"])
        cluster.add_node(num_cpus=3, temp_dir=str(tmp / "third"))  # room for a second worker again
        on_two = wait_for("resume on 2 workers", lambda r: r.get("event") == "resume" and r["world_size"] == 2
                          and r["step"] > on_one["step"])
        runner.join(timeout=300)
    finally:
        if runner.is_alive():  # a failed wait: end the run before the module's teardown
            _stop_train_runs()
            runner.join(timeout=60)
    assert "error" not in outcome and not runner.is_alive(), outcome.get("error")
    assert outcome["result"].step == steps

    saved = [r["step"] for r in records if r.get("event") == "checkpoint"]
    assert on_one["step"] in saved and on_two["step"] in saved  # each resume starts from a saved step
    final = checkpoint.read_train_state(f"{RUNS}/elastic/{checkpoint.dir_name(steps)}")
    assert final["step"] == steps and final["world_size"] == 2
    # The data order is the sampler's, remapped by samples, not by steps: the effective steps
    # (1 or 2 ranks each) read the epoch's sequence in order, none twice, none skipped.
    effective = effective_steps(records)
    assert sorted(effective) == list(range(1, steps + 1))
    worlds = {s: len(r["samples"]) for s, r in effective.items()}
    assert {worlds[s] for s in range(1, on_one["step"] + 1)} == {2}
    assert {worlds[s] for s in range(on_one["step"] + 1, on_two["step"] + 1)} == {1}
    assert {worlds[s] for s in range(on_two["step"] + 1, steps + 1)} == {2}
    assert [k for s in range(1, steps + 1) for rank in effective[s]["samples"] for k in rank] == \
        sampler_keys(LATENTS, worlds, cfg.seed, int(cfg.batch_size or 1))
