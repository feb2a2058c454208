"""CPU stage of preprocessing: validate, decode, resize, center-crop, tokenize (no Ray here).

`CpuTransform` is the Ray Data UDF; it works on numpy batches in the normalized
column layout (key, caption, image bytes, width, height) and drops broken rows,
reporting why through a callback so the driver can count them.
"""

from __future__ import annotations

import io
import math
from collections import Counter
from collections.abc import Callable
from typing import Any

import numpy as np
from PIL import Image

from sd_reference import metrics

BROKEN_REASONS = ("bad_image", "missing_caption", "zero_size", "missing_image")


class BrokenRow(Exception):
    """A row that cannot be used; `reason` is one of BROKEN_REASONS."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


def clean_caption(value: Any) -> str:
    """Caption as text, or BrokenRow('missing_caption') when absent or blank."""
    if isinstance(value, bytes):
        value = value.decode("utf-8", errors="replace")
    if value is None or (isinstance(value, float) and math.isnan(value)):
        raise BrokenRow("missing_caption")
    text = str(value).strip()
    if not text:
        raise BrokenRow("missing_caption")
    return text


def decode_resize_crop(data: Any, resolution: int) -> np.ndarray:
    """Image bytes -> uint8 (3, R, R): short side resized to R, then the center square."""
    if not isinstance(data, (bytes, bytearray, memoryview)) or len(data) == 0:
        raise BrokenRow("missing_image")
    try:
        image = Image.open(io.BytesIO(bytes(data)))
        image.load()
    except Exception as exc:  # noqa: BLE001 - PIL raises many types for bad bytes
        raise BrokenRow("bad_image") from exc
    if image.width == 0 or image.height == 0:
        raise BrokenRow("zero_size")
    image = image.convert("RGB")
    scale = resolution / min(image.width, image.height)
    size = (max(resolution, round(image.width * scale)), max(resolution, round(image.height * scale)))
    image = image.resize(size, Image.Resampling.BICUBIC)
    left, top = (image.width - resolution) // 2, (image.height - resolution) // 2
    image = image.crop((left, top, left + resolution, top + resolution))
    # uint8 crosses the object store 4x smaller than float; the encoder side normalizes.
    return np.asarray(image, dtype=np.uint8).transpose(2, 0, 1).copy()


def check_size(width: Any, height: Any) -> None:
    """Rows whose metadata says zero width or height are broken (negative = unknown)."""
    try:
        w, h = int(width), int(height)
    except (TypeError, ValueError):
        return
    if w == 0 or h == 0:
        raise BrokenRow("zero_size")


class CpuTransform:
    """Ray Data UDF: normalized rows -> key, caption, pixels (uint8), input_ids; broken rows dropped."""

    def __init__(
        self,
        resolution: int,
        tokenizer_dir: str,
        report: Callable[[int, int, dict[str, int]], None] | None = None,
        sidecar_captions: Any = None,
    ) -> None:
        from transformers import CLIPTokenizer

        from sd_reference.storage import localize

        self.resolution = resolution
        self.tokenizer = CLIPTokenizer.from_pretrained(localize(tokenizer_dir))  # a path or URI
        self.report = report
        self.sidecar_fs = sidecar_captions  # a pyarrow filesystem for image folders

    def _caption(self, batch: dict[str, np.ndarray], i: int) -> Any:
        if self.sidecar_fs is None:
            return batch["caption"][i]
        path = str(batch["key"][i]).rsplit(".", 1)[0] + ".txt"
        try:
            with self.sidecar_fs.open_input_stream(path) as f:
                return f.read()
        except (FileNotFoundError, OSError):
            return None

    def __call__(self, batch: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        from sd_reference.models import tokenize

        keys, captions, pixels = [], [], []
        broken: Counter[str] = Counter()
        n = len(batch["key"])
        for i in range(n):
            try:
                caption = clean_caption(self._caption(batch, i))
                if "width" in batch:
                    check_size(batch["width"][i], batch["height"][i])
                pixels.append(decode_resize_crop(batch["image"][i], self.resolution))
            except BrokenRow as row:
                broken[row.reason] += 1
                continue
            keys.append(str(batch["key"][i]))
            captions.append(caption)
        if self.report is not None:
            self.report(n, len(keys), dict(broken))
        metrics.counter("sd.preprocess.rows.in", n, stage="cpu")
        metrics.counter("sd.preprocess.rows.out", len(keys), stage="cpu")
        for reason, count in broken.items():
            metrics.counter("sd.preprocess.rows.dropped", count, reason=reason)
        r = self.resolution
        max_len = self.tokenizer.model_max_length
        ids = tokenize(self.tokenizer, captions).numpy() if captions else np.zeros((0, max_len), np.int64)
        return {
            "key": np.array(keys, dtype=object),
            "caption": np.array(captions, dtype=object),
            "pixels": np.stack(pixels) if pixels else np.zeros((0, 3, r, r), np.uint8),
            "input_ids": ids.astype(np.int64),
        }


_CACHE: dict[tuple[int, str], CpuTransform] = {}


def cpu_batches(
    batch: dict[str, np.ndarray],
    resolution: int,
    tokenizer_dir: str,
    report: Callable[[int, int, dict[str, int]], None] | None = None,
    sidecar_captions: Any = None,
) -> dict[str, np.ndarray]:
    """Task-style entry point: one CpuTransform per worker process, reused across tasks.

    Tasks (unlike an actor pool) run in Ray's pooled workers, which keep the
    tokenizer imported between batches and between runs on the same cluster.
    """
    key = (resolution, tokenizer_dir)
    if key not in _CACHE:
        metrics.setup()
        _CACHE[key] = CpuTransform(resolution, tokenizer_dir)
    transform = _CACHE[key]
    transform.report, transform.sidecar_fs = report, sidecar_captions
    with metrics.span("sd.preprocess.cpu", rows=len(batch["key"])):
        return transform(batch)
