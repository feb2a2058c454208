"""Helpers for sd_reference's end-to-end tests: a run's effective steps and the keys the sampler hands out."""

from __future__ import annotations

import json
from typing import Any


def effective_steps(records: list[dict[str, Any]]) -> dict[int, dict[str, Any]]:
    """The step records that count: after a resume redoes steps, the last record of each step wins."""
    return {r["step"]: r for r in records if r.get("event") is None and "loss" in r}


def sampler_keys(latents: str, worlds: dict[int, int], seed: int, batch: int, window_blocks: int = 8) -> list[str]:
    """The keys the sampler hands out for steps of the given worker counts, read from the manifest's shards."""
    import pyarrow.parquet as pq

    from sd_reference import storage
    from sd_reference.sampler import EpochOrder, Position

    manifest = json.loads(storage.read_text(storage.join(latents, "manifest.json")))
    keys: list[str] = []
    for f in manifest["files"]:
        fs, path = storage.filesystem(storage.join(latents, f["path"]))
        keys += pq.ParquetFile(fs.open_input_file(path)).read(columns=["key"]).column("key").to_pylist()
    order = EpochOrder([n for f in manifest["files"] for n in f["row_groups"]], seed, window_blocks)
    position, out = Position(), []
    for step in sorted(worlds):
        indices, position = order.next_batch(position, batch * worlds[step])
        out += [keys[int(i)] for i in indices]
    return out
