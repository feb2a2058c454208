"""The offline training feed: each rank reads its samples of the sampler's order from the latent shards.

A rank reads only the parquet row groups its samples fall in (from any URI, through
pyarrow), keeps recently read row groups in a bounded cache, and prepares the next
batches in a background thread while the current step trains. Which samples a step
gets depends only on the sampler (seed, epoch, position), never on timing or on
which rank asked first, so a resumed run reads exactly what the uninterrupted run
would have read.
"""

from __future__ import annotations

import json
import queue
import threading
from collections import OrderedDict
from dataclasses import dataclass
from typing import Any

import numpy as np

from sd_reference import storage
from sd_reference.sampler import EpochOrder, Position, rank_slice

TENSOR_COLUMNS = ("latents", "text_emb")
KEY_COLUMN = "key"


@dataclass
class Shard:
    """One latent parquet file: its URI and the rows of each of its row groups."""

    uri: str
    row_groups: list[int]

    def to_json(self) -> dict[str, Any]:
        return {"uri": self.uri, "row_groups": self.row_groups}

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Shard:
        return cls(data["uri"], [int(n) for n in data["row_groups"]])


@dataclass
class Batch:
    """One rank's batch: tensors for the step, the sample keys, and the position after it."""

    tensors: dict[str, Any]
    keys: list[str]
    position: Position


def _tensor_column(table: Any, name: str) -> np.ndarray:
    """A Ray Data tensor column as (rows, *shape), with or without Ray's arrow extension registered."""
    import pyarrow as pa

    column = table.column(name).combine_chunks()
    if isinstance(column.type, pa.ExtensionType):
        return np.asarray(column.to_numpy(zero_copy_only=False))
    shape = json.loads(table.schema.field(name).metadata[b"ARROW:extension:metadata"])
    return np.asarray(column.flatten().to_numpy(zero_copy_only=False)).reshape(len(column), *shape)


class RowGroupReader:
    """Reads row groups by global block number, with a cache bounded in bytes."""

    def __init__(self, shards: list[Shard], cache_bytes: int) -> None:
        self.locations = [(i, g) for i, s in enumerate(shards) for g in range(len(s.row_groups))]
        self.shards, self.cache_bytes = shards, cache_bytes
        self._cache: OrderedDict[int, dict[str, np.ndarray]] = OrderedDict()
        self._bytes = 0
        self._filesystems: dict[int, tuple[Any, str]] = {}  # made once per shard (S3 may look up the region)

    def block(self, number: int) -> dict[str, np.ndarray]:
        if number in self._cache:
            self._cache.move_to_end(number)
            return self._cache[number]
        import pyarrow.parquet as pq

        shard_index, group = self.locations[number]
        if shard_index not in self._filesystems:
            self._filesystems[shard_index] = storage.filesystem(self.shards[shard_index].uri)
        fs, path = self._filesystems[shard_index]
        with fs.open_input_file(path) as f:
            table = pq.ParquetFile(f).read_row_group(group, columns=[KEY_COLUMN, *TENSOR_COLUMNS])
        data = {c: _tensor_column(table, c) for c in TENSOR_COLUMNS}
        data[KEY_COLUMN] = np.asarray(table.column(KEY_COLUMN).to_pylist(), dtype=object)
        self._cache[number] = data
        self._bytes += sum(v.nbytes for v in data.values())
        while self._bytes > self.cache_bytes and len(self._cache) > 1:
            _, old = self._cache.popitem(last=False)
            self._bytes -= sum(v.nbytes for v in old.values())
        return data


class Feed:
    """Yields this rank's batches from `position` on, prepared `prefetch` batches ahead."""

    def __init__(self, shards: list[Shard], seed: int, position: Position, batch_size: int, rank: int,
                 world: int, window_blocks: int = 8, cache_mib: int = 1024, prefetch: int = 2) -> None:
        self.order = EpochOrder([n for s in shards for n in s.row_groups], seed, window_blocks)
        self.reader = RowGroupReader(shards, cache_mib * 2**20)
        self.batch_size, self.rank, self.world = batch_size, rank, world
        self._next_position = position
        self._queue: queue.Queue[Batch | BaseException] = queue.Queue(maxsize=max(1, prefetch))
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._fill, name="sd-feed", daemon=True)
        self._thread.start()

    def read(self, position: Position) -> Batch:
        """This rank's batch at `position` (no prefetch; also what the thread runs)."""
        indices, after = self.order.next_batch(position, self.batch_size * self.world)
        mine = rank_slice(indices, self.rank, self.batch_size)
        blocks = [self.order.block_of(int(i)) for i in mine]
        rows: dict[str, list[Any]] = {c: [] for c in (KEY_COLUMN, *TENSOR_COLUMNS)}
        for index, block in zip(mine, blocks, strict=True):
            data = self.reader.block(block)
            offset = int(index) - int(self.order.starts[block])
            for c in rows:
                rows[c].append(data[c][offset])
        import torch

        tensors = {c: torch.from_numpy(np.stack(rows[c])) for c in TENSOR_COLUMNS}
        return Batch(tensors, [str(k) for k in rows[KEY_COLUMN]], after)

    def _fill(self) -> None:
        position = self._next_position
        while not self._stop.is_set():
            try:
                batch: Batch | BaseException = self.read(position)
            except BaseException as exc:  # noqa: BLE001 - handed to the training thread
                batch = exc
            while not self._stop.is_set():
                try:
                    self._queue.put(batch, timeout=0.2)
                    break
                except queue.Full:
                    continue
            if isinstance(batch, BaseException):
                return
            position = batch.position

    def next(self) -> Batch:
        item = self._queue.get()
        if isinstance(item, BaseException):
            raise item
        return item

    def close(self) -> None:
        self._stop.set()
        self._thread.join(timeout=5)
