"""train: the driver side: data, the run log, TorchTrainer (Ray Train V2), progress, export at the end.

A run lives in `<storage-path>/<name>/` on any storage (a path or a URI such as
`s3://bucket/runs`): Ray Train's checkpoints (`step_XXXXXXXX`), the training log
(runlog.py) and `run.json`. Starting a run with the same name and storage path
resumes it from its latest checkpoint (Ray Train V2 has no restore API; the run
directory is the identity of a run).
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sd_reference import checkpoint, metrics, runlog, storage
from sd_reference.config import TrainConfig
from sd_reference.errors import UserError
from sd_reference.models import ComponentsSpec, prepare_components
from sd_reference.presets import get_preset

RUN_FILE = "run.json"


@dataclass
class TrainResult:
    run_dir: str
    checkpoint: str
    step: int
    loss: float | None
    seconds: float
    restarts: int
    pipeline: str | None


def _same_location(a: str, b: str) -> bool:
    return (a if storage.has_scheme(a) else str(Path(a).resolve())) == (b if storage.has_scheme(b) else str(Path(b).resolve()))


def _offline_data(cfg: TrainConfig) -> tuple[list[dict[str, Any]], ComponentsSpec, str]:
    """The latent shards (with their row groups), the components and the empty prompt's embedding."""
    from sd_reference.preprocess import load_manifest, shard_row_groups

    manifest, root = load_manifest(cfg.data)
    need = cfg.rows_per_step() * cfg.workers
    if manifest["rows"] < need:
        raise UserError(f"{cfg.data} has {manifest['rows']} rows, fewer than batch size x workers = {need}")
    if manifest["preset"] != cfg.preset or (cfg.resolution and cfg.resolution != manifest["resolution"]):
        raise UserError(f"{cfg.data} was preprocessed for preset {manifest['preset']} at {manifest['resolution']} px: "
                        f"train with --preset {manifest['preset']} (or preprocess again)")
    spec = ComponentsSpec.from_json(manifest["components"])
    if cfg.pretrained and not _same_location(cfg.pretrained, spec.path):
        raise UserError(f"{cfg.data} was encoded with the components in {spec.path}, not {cfg.pretrained}: "
                        "drop --pretrained or preprocess again with it")
    spec.pretrained_unet = cfg.pretrained_unet
    shards = [{"uri": storage.join(root, f["path"]), "row_groups": shard_row_groups(root, f)} for f in manifest["files"]]
    return shards, spec, storage.join(root, manifest["uncond_embedding"])


def _online_dataset(cfg: TrainConfig, run_uri: str) -> tuple[Any, ComponentsSpec]:
    from sd_reference import sources
    from sd_reference.preprocess import cpu_stage

    source = sources.detect(cfg.data)
    preset = get_preset(cfg.preset, cfg.resolution)
    spec = prepare_components(preset, cfg.pretrained, storage.join(run_uri, "components"), cfg.seed)
    spec.pretrained_unet = cfg.pretrained_unet
    ds = cpu_stage(sources.read(source), source, spec, batch_size=32, concurrency=2, stats=None)
    return ds.select_columns(["pixels", "input_ids"]), spec


def _follow(log_actor: Any, on_record: Callable[[dict[str, Any]], None], stop: threading.Event) -> None:
    """Feed each new record of the run log actor to `on_record` (the driver's progress display)."""
    import ray

    seen = 0
    while not stop.wait(0.5):
        try:
            records = ray.get(log_actor.since.remote(seen), timeout=10)
        except Exception:  # noqa: BLE001 - progress only; the run reports its own errors
            continue
        seen += len(records)
        for record in records:
            on_record(record)


def _start_log(run_uri: str) -> Any:
    """The RunLog actor, on the driver's node (it dies with the driver, like the run)."""
    import ray
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    here = NodeAffinitySchedulingStrategy(ray.get_runtime_context().get_node_id(), soft=False)
    return ray.remote(num_cpus=0)(runlog.RunLog).options(scheduling_strategy=here).remote(run_uri)


def check_reachable(cfg: TrainConfig) -> None:
    """Every path the workers touch must be reachable from every node (one-line error otherwise)."""
    from sd_reference.cluster import alive_nodes

    storage.require_reachable({"--data": cfg.data, "--storage-path": cfg.storage_path,
                               "--export-dir": cfg.export_dir, "--pretrained": cfg.pretrained},
                              alive_nodes(), cfg.shared_fs)


def run(cfg: TrainConfig, on_record: Callable[[dict[str, Any]], None] | None = None) -> TrainResult:
    """Train to cfg.steps (resuming the named run if it has checkpoints), then export."""
    import ray
    from ray.train import CheckpointConfig, FailureConfig, RunConfig, ScalingConfig
    from ray.train.torch import TorchConfig, TorchTrainer

    from sd_reference.preemption import SigtermAware
    from sd_reference.train_loop import train_loop_per_worker
    from sd_reference.validation import driver_rows

    cfg = cfg.resolved()
    check_reachable(cfg)
    run_uri = storage.join(cfg.storage_path, str(cfg.name))
    if not storage.has_scheme(run_uri):
        run_uri = str(Path(run_uri).resolve())
    storage.makedirs(run_uri)
    uncond = None
    shards = None
    datasets = {}
    if cfg.online:
        ds, spec = _online_dataset(cfg, run_uri)
        datasets["train"] = ds
    else:
        shards, spec, uncond = _offline_data(cfg)
    if spec.pretrained_unet and not storage.is_dir(storage.join(spec.path, "unet")):
        raise UserError(f"--pretrained-unet: {spec.path} has no unet/ directory")
    use_gpu = cfg.use_gpu if cfg.use_gpu is not None else ray.cluster_resources().get("GPU", 0) > 0
    cfg.use_gpu = use_gpu
    storage.write_text(storage.join(run_uri, RUN_FILE),
                       json.dumps({"config": cfg.to_json(), "components": spec.to_json()}, indent=1))
    log_actor = _start_log(run_uri)
    loop_config = {
        "train": cfg.to_json(),
        "components": spec.to_json(),
        "run_dir": run_uri,
        "log_actor": log_actor,
        "uncond_path": uncond,
        "shards": shards,
        # Validation rows, read once here and handed to every worker through the object store.
        "val_rows": ray.put(driver_rows(cfg, datasets.get("train"))) if cfg.val_every else None,
    }
    fs, storage_path = storage.filesystem(cfg.storage_path)
    trainer = TorchTrainer(
        SigtermAware(train_loop_per_worker),  # unpickled on each worker's main thread: installs the SIGTERM handler
        train_loop_config=loop_config,
        torch_config=TorchConfig(backend="nccl" if use_gpu else "gloo"),
        scaling_config=ScalingConfig(
            num_workers=cfg.num_workers(), use_gpu=use_gpu, resources_per_worker={"CPU": cfg.cpus_per_worker},
            placement_strategy=cfg.placement, elastic_resize_monitor_interval_s=cfg.resize_check_s,
        ),
        run_config=RunConfig(
            name=cfg.name,
            storage_path=storage_path,
            storage_filesystem=fs if storage.has_scheme(cfg.storage_path) else None,
            failure_config=FailureConfig(max_failures=cfg.max_failures),
            checkpoint_config=CheckpointConfig(num_to_keep=cfg.keep_checkpoints),
        ),
        datasets=datasets,
    )
    stop = threading.Event()
    follow = None
    if on_record is not None:
        follow = threading.Thread(target=_follow, args=(log_actor, on_record, stop), daemon=True)
        follow.start()
    start = time.perf_counter()
    try:
        with metrics.span("sd.train.run", {"train.run.id": cfg.name}):
            result = trainer.fit()
    finally:
        stop.set()
        if follow is not None:
            follow.join()
        ray.get(log_actor.flush.remote())
        records = ray.get(log_actor.since.remote(0))  # this invocation's records only
        ray.kill(log_actor)
    if result.error is not None:
        raise result.error
    elapsed = time.perf_counter() - start
    ckpt = checkpoint.latest(run_uri)
    restarts = sum(1 for r in records if r.get("event") == "resume")
    losses = [r["loss"] for r in records if "loss" in r and r.get("event") is None]
    pipeline = None
    if cfg.export:
        from sd_reference.export import export_pipeline

        pipeline = export_pipeline(run_uri, cfg.export_dir or storage.join(run_uri, "pipeline"))
    state = checkpoint.read_train_state(ckpt)
    return TrainResult(run_uri, ckpt, int(state["step"]), losses[-1] if losses else None, elapsed, restarts, pipeline)
