"""make-data: a deterministic synthetic captioned-image set (coloured shapes).

Written as LAION-style parquet (`hash, caption, jpg, width, height`), as
webdataset tar shards in img2dataset's layout (`KEY.jpg`, `KEY.txt`, `KEY.json`)
and optionally as an image folder (`KEY.jpg` + `KEY.txt`). Every sample depends
only on (seed, index), so the same arguments give byte-identical files.
`--broken N` adds N deliberately bad rows (bad bytes, missing caption, zero size)
to exercise the preprocessing's error accounting.
"""

from __future__ import annotations

import hashlib
import io
import json
import random
import tarfile
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

from PIL import Image, ImageDraw

COLORS = {
    "red": (220, 40, 40),
    "green": (40, 170, 60),
    "blue": (40, 70, 220),
    "yellow": (240, 220, 40),
    "purple": (140, 60, 180),
    "orange": (245, 140, 30),
    "white": (245, 245, 245),
    "black": (20, 20, 20),
}
SHAPES = ("circle", "square", "triangle", "diamond")
FORMATS = ("parquet", "webdataset", "folder")
BROKEN_KINDS = ("bad_image", "missing_caption", "zero_size")


@dataclass
class Sample:
    key: str
    caption: str | None
    jpg: bytes
    width: int
    height: int


def _draw_shape(draw: ImageDraw.ImageDraw, shape: str, box: tuple[int, int, int, int], fill: tuple[int, int, int]) -> None:
    x0, y0, x1, y1 = box
    cx, cy = (x0 + x1) // 2, (y0 + y1) // 2
    if shape == "circle":
        draw.ellipse(box, fill=fill)
    elif shape == "square":
        draw.rectangle(box, fill=fill)
    elif shape == "triangle":
        draw.polygon([(cx, y0), (x1, y1), (x0, y1)], fill=fill)
    else:
        draw.polygon([(cx, y0), (x1, cy), (cx, y1), (x0, cy)], fill=fill)


def make_sample(seed: int, index: int, min_size: int = 64, max_size: int = 128) -> Sample:
    """One captioned image; non-square sizes so resize + center crop matter."""
    rng = random.Random(f"{seed}:{index}")
    width, height = rng.randint(min_size, max_size), rng.randint(min_size, max_size)
    bg_name = rng.choice(list(COLORS))
    n_shapes = 1 if rng.random() < 0.7 else 2
    image = Image.new("RGB", (width, height), COLORS[bg_name])
    draw = ImageDraw.Draw(image)
    parts = []
    side = min(width, height)
    for slot in range(n_shapes):
        color = rng.choice([c for c in COLORS if c != bg_name])
        shape = rng.choice(SHAPES)
        big = rng.random() < 0.5
        size = int(side * (0.6 if big else 0.35))
        # Two shapes go left and right of the centre so they do not hide each other.
        cx = width // 2 if n_shapes == 1 else (width * (1 + 2 * slot)) // 4
        cy = height // 2 + rng.randint(-side // 10, side // 10)
        box = (cx - size // 2, cy - size // 2, cx + size // 2, cy + size // 2)
        _draw_shape(draw, shape, box, COLORS[color])
        parts.append(f"a {'large' if big else 'small'} {color} {shape}")
    caption = f"{' and '.join(parts)} on a {bg_name} background"
    buf = io.BytesIO()
    image.save(buf, format="JPEG", quality=90)
    key = f"{index:09d}"
    return Sample(key, caption, buf.getvalue(), width, height)


def make_broken(sample: Sample, kind: str) -> Sample:
    if kind == "bad_image":
        return Sample(sample.key, sample.caption, b"\xff\xd8 not a jpeg", sample.width, sample.height)
    if kind == "missing_caption":
        return Sample(sample.key, None, sample.jpg, sample.width, sample.height)
    return Sample(sample.key, sample.caption, sample.jpg, 0, 0)


def generate(num: int, seed: int, broken: int) -> Iterator[Sample]:
    """`num` samples; the `broken` ones are spread evenly and cycle through BROKEN_KINDS."""
    broken_at = {round(i * num / broken) + num // (2 * broken): i for i in range(broken)} if broken else {}
    for index in range(num):
        sample = make_sample(seed, index)
        if index in broken_at:
            sample = make_broken(sample, BROKEN_KINDS[broken_at[index] % len(BROKEN_KINDS)])
        yield sample


def row_hash(sample: Sample) -> str:
    return hashlib.sha1(sample.key.encode() + sample.jpg).hexdigest()[:16]


def write_parquet(samples: list[Sample], out: Path, shards: int) -> list[Path]:
    import pyarrow as pa
    import pyarrow.parquet as pq

    out.mkdir(parents=True, exist_ok=True)
    paths = []
    for shard, chunk in enumerate(_chunks(samples, shards)):
        table = pa.table(
            {
                "hash": pa.array([row_hash(s) for s in chunk], pa.string()),
                "caption": pa.array([s.caption for s in chunk], pa.string()),
                "jpg": pa.array([s.jpg for s in chunk], pa.binary()),
                "width": pa.array([s.width for s in chunk], pa.int32()),
                "height": pa.array([s.height for s in chunk], pa.int32()),
            }
        )
        path = out / f"part-{shard:05d}.parquet"
        pq.write_table(table, path)
        paths.append(path)
    return paths


def write_webdataset(samples: list[Sample], out: Path, shards: int) -> list[Path]:
    out.mkdir(parents=True, exist_ok=True)
    paths = []
    for shard, chunk in enumerate(_chunks(samples, shards)):
        path = out / f"{shard:05d}.tar"
        with tarfile.open(path, "w", format=tarfile.USTAR_FORMAT) as tar:
            for s in chunk:
                meta = {"key": s.key, "caption": s.caption, "width": s.width, "height": s.height, "status": "success"}
                members = {"jpg": s.jpg, "json": json.dumps(meta, sort_keys=True).encode()}
                if s.caption is not None:  # img2dataset omits the caption file when there is none
                    members["txt"] = s.caption.encode()
                for ext, data in members.items():
                    info = tarfile.TarInfo(f"{s.key}.{ext}")
                    info.size, info.mtime, info.mode = len(data), 0, 0o644  # mtime 0: deterministic bytes
                    tar.addfile(info, io.BytesIO(data))
        paths.append(path)
    return paths


def write_folder(samples: list[Sample], out: Path) -> list[Path]:
    out.mkdir(parents=True, exist_ok=True)
    paths = []
    for s in samples:
        (out / f"{s.key}.jpg").write_bytes(s.jpg)
        if s.caption is not None:
            (out / f"{s.key}.txt").write_text(s.caption)
        paths.append(out / f"{s.key}.jpg")
    return paths


def _chunks(samples: list[Sample], shards: int) -> Iterator[list[Sample]]:
    shards = max(1, min(shards, len(samples)))
    per = -(-len(samples) // shards)
    for i in range(0, len(samples), per):
        yield samples[i : i + per]


def make_data(
    out: Path,
    num: int = 256,
    seed: int = 0,
    shards: int = 2,
    broken: int = 0,
    formats: tuple[str, ...] = ("parquet", "webdataset"),
    on_sample: Callable[[], None] | None = None,
) -> dict[str, str]:
    """Write the data set in each of `formats` under `out`; returns format -> directory."""
    samples = []
    for sample in generate(num, seed, broken):
        samples.append(sample)
        if on_sample:
            on_sample()
    written: dict[str, str] = {}
    if "parquet" in formats:
        write_parquet(samples, out / "laion", shards)
        written["parquet"] = str(out / "laion")
    if "webdataset" in formats:
        write_webdataset(samples, out / "wds", shards)
        written["webdataset"] = str(out / "wds")
    if "folder" in formats:
        write_folder(samples, out / "images")
        written["folder"] = str(out / "images")
    return written
