"""Sample grids during training: the EMA UNet denoises fixed prompts from fixed noise; rank 0 writes a PNG.

Every rank runs the same DDIM loop (the UNet's forward is collective under FSDP2);
only rank 0 decodes with the VAE and writes `samples/step_XXXXXXXX.png` under the
run's output directory. Same prompts, same starting noise at every grid, so grids
of successive steps show the training progress side by side.
"""

from __future__ import annotations

import io
import math
from typing import TYPE_CHECKING, Any

import numpy as np
import torch

from sd_reference.sample import DEFAULT_PROMPTS

if TYPE_CHECKING:
    from PIL.Image import Image

    from sd_reference.train_loop import Worker

GRID_STEPS = 20
GRID_GUIDANCE = 5.0


def write_output(out_dir: str, relative: str, data: bytes) -> str:
    """Write one file of the run's outputs (a path or URI, storage.py); returns where it went."""
    from sd_reference import storage

    uri = storage.join(out_dir, *relative.split("/"))
    storage.write_bytes(uri, data)
    return uri


def tile(images: np.ndarray) -> Image:
    """uint8 images (N, H, W, 3) -> one PIL image, ceil(sqrt(N)) columns."""
    from PIL import Image

    n, h, w, _ = images.shape
    cols = math.ceil(math.sqrt(n))
    rows = math.ceil(n / cols)
    canvas = np.full((rows * h, cols * w, 3), 255, np.uint8)
    for i, img in enumerate(images):
        r, c = divmod(i, cols)
        canvas[r * h:(r + 1) * h, c * w:(c + 1) * w] = img
    return Image.fromarray(canvas)


class SampleGrid:
    """Fixed prompts and starting noise; `render(step)` samples, tiles and writes (collective)."""

    def __init__(self, worker: Worker, out_dir: str, prompts: tuple[str, ...] = DEFAULT_PROMPTS,
                 steps: int = GRID_STEPS, guidance: float = GRID_GUIDANCE, seed: int = 0) -> None:
        self.worker, self.out_dir = worker, out_dir
        self.prompts, self.steps, self.guidance, self.seed = prompts, steps, guidance, seed
        self._cond: torch.Tensor | None = None
        self._vae: Any = None

    def _conditioning(self) -> torch.Tensor:
        """[uncond x N, prompts x N] text embeddings on the device (encoders loaded once, then dropped)."""
        if self._cond is None:
            from sd_reference.models import encode_text, load_encoders, load_tokenizer, tokenize

            w = self.worker
            vae, text_encoder = (w.vae, w.text_encoder) if w.text_encoder is not None else \
                load_encoders(w.spec, str(w.device))
            ids = tokenize(load_tokenizer(w.spec), ["", *self.prompts])
            emb = encode_text(text_encoder, ids).float()
            uncond, cond = emb[:1], emb[1:]
            n = len(self.prompts)
            self._cond = torch.cat([uncond.expand(n, -1, -1), cond]).to(w.device)
            self._vae = vae if w.rank == 0 else None  # only rank 0 decodes
        return self._cond

    @torch.no_grad()
    def latents(self) -> torch.Tensor:
        """DDIM with classifier-free guidance, the EMA weights swapped in; (N, 4, h, w) on the device."""
        from diffusers import DDIMScheduler

        from sd_reference import parallel
        from sd_reference.models import load_scheduler_config

        w = self.worker
        text = self._conditioning()
        scheduler = DDIMScheduler.from_config(load_scheduler_config(w.spec), prediction_type=w.cfg.prediction_type)
        scheduler.set_timesteps(self.steps)
        n = len(self.prompts)
        gen = torch.Generator().manual_seed(self.seed)  # CPU: the same grid noise on every device
        x = torch.randn((n, *w.latent_shape), generator=gen).to(w.device)
        with w.ema.swapped_in(parallel.named_params(w.model)):
            for t in scheduler.timesteps:
                both = torch.cat([x, x])
                pred = w.predict(both, t.to(w.device).expand(2 * n), text).float()
                uncond, cond = pred.chunk(2)
                x = scheduler.step(uncond + self.guidance * (cond - uncond), t, x).prev_sample
        return x

    def render(self, step: int) -> str | None:
        """Sample (every rank), decode and write the grid (rank 0); returns the file rank 0 wrote."""
        x = self.latents()
        if self.worker.rank != 0:
            return None
        vae = self._vae
        with torch.no_grad():
            images = vae.decode(x.to(next(vae.parameters()).dtype) / vae.config.scaling_factor).sample
        pixels = ((images.float().clamp(-1, 1) + 1) * 127.5).round().to(torch.uint8).permute(0, 2, 3, 1).cpu().numpy()
        buf = io.BytesIO()
        tile(pixels).save(buf, format="PNG")
        return write_output(self.out_dir, f"samples/step_{step:08d}.png", buf.getvalue())
