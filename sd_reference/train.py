"""train: the driver side: datasets, TorchTrainer (Ray Train V2), progress, export at the end.

A run lives in `<storage-path>/<name>/`: Ray Train's checkpoints (`step_XXXXXXXX`),
`train_log.jsonl` and `run.json`. Starting a run with the same name and storage
path resumes it from its latest checkpoint (Ray Train V2 has no restore API; the
run directory is the identity of a run).
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sd_reference import checkpoint, metrics
from sd_reference.config import TrainConfig
from sd_reference.errors import UserError
from sd_reference.models import ComponentsSpec, prepare_components
from sd_reference.presets import get_preset

LOG_FILE = "train_log.jsonl"
RUN_FILE = "run.json"


@dataclass
class TrainResult:
    run_dir: Path
    checkpoint: Path
    step: int
    loss: float | None
    seconds: float
    restarts: int
    pipeline: Path | None


def read_log(path: Path, offset: int = 0) -> list[dict[str, Any]]:
    """Records of a training log from byte `offset`; a torn line (killed writer) is skipped."""
    if not path.exists():
        return []
    with path.open("rb") as f:
        f.seek(offset)
        text = f.read().decode(errors="replace")
    out = []
    for line in text.splitlines():
        try:
            out.append(json.loads(line))
        except ValueError:
            continue
    return out


def _offline_dataset(cfg: TrainConfig) -> tuple[Any, ComponentsSpec, str]:
    import ray.data

    from sd_reference.preprocess import load_manifest

    manifest, root = load_manifest(cfg.data)
    need = cfg.rows_per_step() * cfg.workers
    if manifest["rows"] < need:
        raise UserError(f"{cfg.data} has {manifest['rows']} rows, fewer than batch size x workers = {need}")
    if manifest["preset"] != cfg.preset or (cfg.resolution and cfg.resolution != manifest["resolution"]):
        raise UserError(f"{cfg.data} was preprocessed for preset {manifest['preset']} at {manifest['resolution']} px: "
                        f"train with --preset {manifest['preset']} (or preprocess again)")
    spec = ComponentsSpec.from_json(manifest["components"])
    if cfg.pretrained and Path(cfg.pretrained).resolve() != Path(spec.path).resolve():
        raise UserError(f"{cfg.data} was encoded with the components in {spec.path}, not {cfg.pretrained}: "
                        "drop --pretrained or preprocess again with it")
    spec.pretrained_unet = cfg.pretrained_unet
    files = [str(root / f["path"]) for f in manifest["files"]]
    ds = ray.data.read_parquet(files).select_columns(["latents", "text_emb"])
    size = sum((root / f["path"]).stat().st_size for f in manifest["files"] if (root / f["path"]).exists())
    if size < cfg.cache_data_mib * 2**20:
        # Small enough for the object store: read once, not once per epoch and per restart.
        ds = ds.materialize()
    # Absolute: Train workers need not run in the driver's working directory.
    return ds.randomize_block_order(seed=cfg.seed), spec, str((root / manifest["uncond_embedding"]).resolve())


def _online_dataset(cfg: TrainConfig, run_dir: Path) -> tuple[Any, ComponentsSpec]:
    from sd_reference import sources
    from sd_reference.preprocess import cpu_stage

    source = sources.detect(cfg.data)
    preset = get_preset(cfg.preset, cfg.resolution)
    spec = prepare_components(preset, cfg.pretrained, run_dir / "components", cfg.seed)
    spec.pretrained_unet = cfg.pretrained_unet
    ds = cpu_stage(sources.read(source), source, spec, batch_size=32, concurrency=2, stats=None)
    return ds.select_columns(["pixels", "input_ids"]), spec


def _tail(log_path: Path, offset: int, on_record: Callable[[dict[str, Any]], None], stop: threading.Event) -> None:
    """Follow the log rank 0 writes and feed each complete new record to `on_record`."""
    while not stop.is_set():
        stop.wait(0.5)
        if not log_path.exists():
            continue
        with log_path.open("rb") as f:
            f.seek(offset)
            chunk = f.read()
        complete = chunk[: chunk.rfind(b"\n") + 1]  # a half-written line waits for the next poll
        offset += len(complete)
        for line in complete.decode(errors="replace").splitlines():
            try:
                on_record(json.loads(line))
            except ValueError:
                continue


def run(cfg: TrainConfig, on_record: Callable[[dict[str, Any]], None] | None = None) -> TrainResult:
    """Train to cfg.steps (resuming the named run if it has checkpoints), then export."""
    import ray
    from ray.train import CheckpointConfig, FailureConfig, RunConfig, ScalingConfig
    from ray.train.torch import TorchConfig, TorchTrainer

    from sd_reference.train_loop import train_loop_per_worker
    from sd_reference.validation import driver_rows

    cfg = cfg.resolved()
    storage = Path(cfg.storage_path).resolve()
    run_dir = storage / str(cfg.name)
    run_dir.mkdir(parents=True, exist_ok=True)
    uncond = None
    if cfg.online:
        ds, spec = _online_dataset(cfg, run_dir)
    else:
        ds, spec, uncond = _offline_dataset(cfg)
    if spec.pretrained_unet and not (Path(spec.path) / "unet").is_dir():
        raise UserError(f"--pretrained-unet: {spec.path} has no unet/ directory")
    use_gpu = cfg.use_gpu if cfg.use_gpu is not None else ray.cluster_resources().get("GPU", 0) > 0
    cfg.use_gpu = use_gpu
    (run_dir / RUN_FILE).write_text(json.dumps({"config": cfg.to_json(), "components": spec.to_json()}, indent=1))
    log_path = run_dir / LOG_FILE
    loop_config = {
        "train": cfg.to_json(),
        "components": spec.to_json(),
        "run_dir": str(run_dir),
        "log_path": str(log_path),
        "uncond_path": uncond,
        # Validation rows, read once here and handed to every worker through the object store.
        "val_rows": ray.put(driver_rows(cfg, ds)) if cfg.val_every else None,
    }
    trainer = TorchTrainer(
        train_loop_per_worker,
        train_loop_config=loop_config,
        torch_config=TorchConfig(backend="nccl" if use_gpu else "gloo"),
        scaling_config=ScalingConfig(
            num_workers=cfg.workers, use_gpu=use_gpu, resources_per_worker={"CPU": cfg.cpus_per_worker}
        ),
        run_config=RunConfig(
            name=cfg.name,
            storage_path=str(storage),
            failure_config=FailureConfig(max_failures=cfg.max_failures),
            checkpoint_config=CheckpointConfig(num_to_keep=cfg.keep_checkpoints),
        ),
        datasets={"train": ds},
    )
    stop = threading.Event()
    start_size = log_path.stat().st_size if log_path.exists() else 0
    tail = None
    if on_record is not None:
        tail = threading.Thread(target=_tail, args=(log_path, start_size, on_record, stop), daemon=True)
        tail.start()
    start = time.perf_counter()
    try:
        with metrics.span("sd.train.run", {"train.run.id": cfg.name}):
            result = trainer.fit()
    finally:
        stop.set()
        if tail is not None:
            tail.join()
    if result.error is not None:
        raise result.error
    elapsed = time.perf_counter() - start
    ckpt = checkpoint.latest(run_dir)
    records = read_log(log_path, start_size)  # this invocation's records only
    restarts = sum(1 for r in records if r.get("event") == "resume")
    losses = [r["loss"] for r in records if "loss" in r and r.get("event") is None]
    pipeline = None
    if cfg.export:
        from sd_reference.export import export_pipeline

        pipeline = export_pipeline(run_dir, Path(cfg.export_dir) if cfg.export_dir else run_dir / "pipeline")
    state = json.loads((ckpt / checkpoint.STATE_FILE).read_text())
    return TrainResult(run_dir, ckpt, int(state["step"]), losses[-1] if losses else None, elapsed, restarts, pipeline)

