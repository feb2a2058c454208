"""export: a run's EMA UNet plus its VAE, text encoder, tokenizer and scheduler as a diffusers pipeline.

The output directory loads with `diffusers.StableDiffusionPipeline.from_pretrained(DIR)`
as is. Runs in one process: the sharded DCP checkpoint is read straight into a full
UNet (DCP reshards on load; no process group needed). The run, the checkpoint and
the output are paths or URIs: a remote checkpoint is copied to a temporary
directory first, a remote output is written locally and uploaded.
"""

from __future__ import annotations

import json
import shutil
import tempfile
from pathlib import Path
from typing import Any

from sd_reference import checkpoint, storage
from sd_reference.errors import UserError
from sd_reference.models import (
    ComponentsSpec,
    load_encoders,
    load_scheduler_config,
    load_tokenizer,
    quiet,
)

EXPORT_INFO = "sd_reference_export.json"


def load_run(run_uri: str) -> dict[str, Any]:
    path = storage.join(run_uri, "run.json")
    if not storage.exists(path):
        raise UserError(f"{run_uri} is not a training run (no run.json): pass the directory `train` wrote")
    return dict(json.loads(storage.read_text(path)))


def _unet_weights(ckpt: str, unet: Any, use_ema: bool) -> dict[str, Any]:
    """Load a checkpoint (any storage) into a full UNet; returns its train_state."""
    import warnings

    temporary = None
    if storage.is_remote(ckpt):  # a one-off copy, not the node cache: checkpoints are large
        temporary = Path(tempfile.mkdtemp(prefix="sd_reference-ckpt-"))
        storage.download_dir(ckpt, temporary)
    local = temporary or storage.localize(ckpt)
    try:
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", message=".*single process.*")  # intended: no process group
            return checkpoint.load_unet_weights(local, unet, use_ema)
    finally:
        if temporary is not None:
            shutil.rmtree(temporary, ignore_errors=True)


def export_pipeline(run_uri: str, out: str, ckpt: str | None = None, use_ema: bool = True) -> str:
    """Write the pipeline directory; returns `out`."""
    from diffusers import DDIMScheduler, StableDiffusionPipeline, UNet2DConditionModel

    quiet()
    run = load_run(run_uri)
    spec = ComponentsSpec.from_json(run["components"])
    ckpt = ckpt or checkpoint.latest(run_uri)
    if not storage.exists(storage.join(ckpt, ".metadata")):
        raise UserError(f"{ckpt} is not a complete checkpoint (no DCP .metadata)")
    unet = UNet2DConditionModel(**spec.unet)
    state = _unet_weights(ckpt, unet, use_ema)
    vae, text_encoder = load_encoders(spec)
    prediction_type = run["config"]["prediction_type"]
    scheduler = DDIMScheduler.from_config(load_scheduler_config(spec), prediction_type=prediction_type)
    pipe = StableDiffusionPipeline(
        vae=vae,
        text_encoder=text_encoder,
        tokenizer=load_tokenizer(spec),
        unet=unet,
        scheduler=scheduler,
        safety_checker=None,
        feature_extractor=None,
        requires_safety_checker=False,
    )
    if not storage.is_remote(out):
        shutil.rmtree(storage.filesystem(out)[1], ignore_errors=True)  # no stale component from an older export
    local, staged = storage.local_or_staging(out)
    pipe.save_pretrained(local)
    info = {
        "run_dir": _absolute(run_uri),
        "checkpoint": _absolute(ckpt),
        "step": state["step"],
        "ema": use_ema,
        "prediction_type": prediction_type,
        "resolution": spec.resolution,
    }
    (local / EXPORT_INFO).write_text(json.dumps(info, indent=1))
    storage.finish_staging(local, out, staged, replace=True)
    return out


def _absolute(uri: str) -> str:
    return uri if storage.has_scheme(uri) else str(Path(uri).resolve())
