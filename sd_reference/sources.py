"""Input readers: LAION-style parquet, webdataset tar shards, image folders -> Ray Data.

Every reader returns a dataset in one normalized layout (key, caption, image
bytes, width, height; width/height -1 when unknown) so the CPU stage needs no
per-format code. Inputs are checked on the driver first so a missing path, an
empty directory or a corrupt parquet file is one clear error, not a stack trace
from a Ray task. An input is a path or a URI (storage.py): Ray Data reads it
through the same pyarrow filesystem on whichever node runs each read task.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from sd_reference import storage
from sd_reference.errors import UserError

IMAGE_EXTENSIONS = ("jpg", "jpeg", "png", "webp", "bmp")
SOURCE_FORMATS = ("auto", "parquet", "webdataset", "folder")


@dataclass
class Source:
    """A checked input: its format, files and (for parquet) the row count from metadata."""

    fmt: str
    root: str
    files: list[str]
    rows: int | None = None


def detect(path_str: str, fmt: str = "auto") -> Source:
    """Resolve and check an input path or URI; raises UserError with the reason and a fix."""
    if fmt not in SOURCE_FORMATS:
        raise UserError(f"unknown input format '{fmt}' (choose from {', '.join(SOURCE_FORMATS)})")
    root = path_str if storage.has_scheme(path_str) else storage.filesystem(path_str)[1]
    if not storage.exists(root):
        raise UserError(f"input path {path_str} does not exist (run `python -m sd_reference make-data` first?)")
    found = storage.list_files(root)
    candidates = {
        "parquet": [f for f in found if _suffix(f) == "parquet"],
        "webdataset": [f for f in found if _suffix(f) == "tar"],
        "folder": [f for f in found if _suffix(f) in IMAGE_EXTENSIONS],
    }
    if fmt == "auto":
        fmt = next((f for f, files in candidates.items() if files), "none")
        if fmt == "none":
            raise UserError(f"no parquet, .tar or image files under {path_str}: the dataset is empty")
    files = candidates[fmt]
    if not files:
        raise UserError(f"no {fmt} files under {path_str}: the dataset is empty")
    rows = _parquet_rows(files) if fmt == "parquet" else None
    if rows == 0:
        raise UserError(f"the parquet files under {path_str} have 0 rows: the dataset is empty")
    return Source(fmt, root, files, rows)


def _suffix(uri: str) -> str:
    name = storage.name(uri)
    return name.rsplit(".", 1)[-1].lower() if "." in name else ""


def _open_parquet(uri: str) -> Any:
    import pyarrow.parquet as pq

    fs, path = storage.filesystem(uri)
    return pq.ParquetFile(fs.open_input_file(path))


def _parquet_rows(files: list[str]) -> int:
    rows = 0
    for f in files:
        try:
            rows += _open_parquet(f).metadata.num_rows
        except Exception as exc:  # noqa: BLE001 - pyarrow raises ArrowInvalid/OSError
            raise UserError(f"corrupt parquet file {f}: {exc}") from exc
    return rows


def _fs_paths(source: Source) -> tuple[Any, list[str]]:
    """One pyarrow filesystem and the files' paths inside it (what Ray Data's readers take)."""
    fs = storage.filesystem(source.root)[0]
    return fs, [storage.filesystem(f)[1] for f in source.files]


def _wds_normalize(sample: dict[str, Any]) -> dict[str, Any]:
    """webdataset sample (raw bytes per extension) -> the normalized row layout."""
    meta: dict[str, Any] = {}
    if isinstance(sample.get("json"), bytes):
        try:
            meta = json.loads(sample["json"])
        except ValueError:
            meta = {}
    image = next((sample[e] for e in IMAGE_EXTENSIONS if e in sample), None)
    caption = sample.get("txt", sample.get("caption", meta.get("caption")))
    if isinstance(caption, bytes):
        caption = caption.decode("utf-8", errors="replace")
    return {
        "key": str(sample.get("__key__", "")),
        "caption": caption,
        "image": image,
        "width": int(meta.get("width", -1) if meta.get("width") is not None else -1),
        "height": int(meta.get("height", -1) if meta.get("height") is not None else -1),
    }


def read(source: Source, columns: dict[str, str] | None = None) -> Any:
    """The Ray Data dataset for a checked source, in the normalized layout."""
    import ray.data

    if source.fmt == "parquet":
        # LAION/Anyscale names by default; override for other parquet layouts.
        names = {"key": "hash", "caption": "caption", "image": "jpg", "width": "width", "height": "height"}
        names.update(columns or {})
        # Name a missing column now, not from inside a Ray task.
        have = set(_open_parquet(source.files[0]).schema_arrow.names)
        missing = [c for c in names.values() if c not in have]
        if missing:
            raise UserError(
                f"parquet {source.files[0]} has no column(s) {', '.join(missing)} "
                f"(it has {', '.join(sorted(have))}; see --caption-column/--image-column/--key-column)"
            )
        fs, paths = _fs_paths(source)
        ds = ray.data.read_parquet(paths, filesystem=fs).select_columns(list(names.values()))
        return ds.rename_columns({v: k for k, v in names.items() if k != v})
    fs, paths = _fs_paths(source)
    if source.fmt == "webdataset":
        return ray.data.read_webdataset(paths, filesystem=fs, decoder=_wds_normalize)
    ds = ray.data.read_binary_files(paths, filesystem=fs, include_paths=True)
    return ds.rename_columns({"bytes": "image", "path": "key"})


def sidecar_filesystem(source: Source) -> Any:
    """The filesystem image-folder captions (KEY.txt beside KEY.jpg) are read from."""
    if source.fmt != "folder":
        return None
    return storage.filesystem(source.root)[0]
