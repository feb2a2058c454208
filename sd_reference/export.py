"""export: a run's EMA UNet plus its VAE, text encoder, tokenizer and scheduler as a diffusers pipeline.

The output directory loads with `diffusers.StableDiffusionPipeline.from_pretrained(DIR)`
as is. Runs in one process: the sharded DCP checkpoint is read straight into a full
UNet (DCP reshards on load; no process group needed).
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

from sd_reference import checkpoint
from sd_reference.errors import UserError
from sd_reference.models import (
    ComponentsSpec,
    load_encoders,
    load_scheduler_config,
    load_tokenizer,
    quiet,
)

EXPORT_INFO = "sd_reference_export.json"


def load_run(run_dir: Path) -> dict[str, Any]:
    path = run_dir / "run.json"
    if not path.exists():
        raise UserError(f"{run_dir} is not a training run (no run.json): pass the directory `train` wrote")
    return json.loads(path.read_text())


def export_pipeline(run_dir: Path, out: Path, ckpt: Path | None = None, use_ema: bool = True) -> Path:
    """Write the pipeline directory; returns `out`."""
    import warnings

    from diffusers import DDIMScheduler, StableDiffusionPipeline, UNet2DConditionModel

    quiet()
    run = load_run(run_dir)
    spec = ComponentsSpec.from_json(run["components"])
    ckpt = ckpt or checkpoint.latest(run_dir)
    if not (ckpt / ".metadata").exists():
        raise UserError(f"{ckpt} is not a complete checkpoint (no DCP .metadata)")
    unet = UNet2DConditionModel(**spec.unet)
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=".*single process.*")  # intended: no process group
        state = checkpoint.load_unet_weights(ckpt, unet, use_ema)
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
    if out.exists():
        shutil.rmtree(out)  # a stale component from an older export must not survive
    pipe.save_pretrained(out)
    info = {
        "run_dir": str(run_dir.resolve()),
        "checkpoint": str(ckpt.resolve()),
        "step": state["step"],
        "ema": use_ema,
        "prediction_type": prediction_type,
        "resolution": spec.resolution,
        "train_log": str((run_dir / "train_log.jsonl").resolve()),
    }
    (out / EXPORT_INFO).write_text(json.dumps(info, indent=1))
    return out
