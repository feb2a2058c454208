"""The order training reads samples in: a seeded sequence per epoch, the same for any worker count.

Each epoch's order is a pure function of (seed, epoch, block sizes): the blocks
(parquet row groups) are permuted, then the rows inside each window of
`window_blocks` consecutive blocks are permuted. Every step takes the next
`batch_size x world_size` indices of that sequence and rank r trains on its r-th
slice. A run's place in the data is a `Position` (epoch, samples consumed in
it), saved in every checkpoint: a resumed run continues at exactly the next
sample. A run resumed on a different number of workers continues at the same
sample too, only in slices of the new size, so no sample of the epoch is seen
twice or skipped. An epoch ends when fewer than one global batch of its samples
is left (those few are dropped, like `drop_last`).

Pure logic, no Ray and no I/O: `feed.py` reads the rows.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

_WINDOW_CACHE = 4  # windows of permuted rows kept per order (the one being read and its neighbours)


@dataclass(frozen=True)
class Position:
    """Where a run is in its data: the epoch and how many of its samples were trained on."""

    epoch: int = 0
    consumed: int = 0

    def to_json(self) -> dict[str, int]:
        return {"epoch": self.epoch, "consumed": self.consumed}

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Position:
        return cls(int(data["epoch"]), int(data["consumed"]))


def _seed(*values: int) -> np.random.Generator:
    return np.random.default_rng([v % 2**63 for v in values])


class EpochOrder:
    """The per-epoch order of global row indices over blocks of the given sizes."""

    def __init__(self, block_sizes: Sequence[int], seed: int, window_blocks: int = 8) -> None:
        if not block_sizes or min(block_sizes) < 1:
            raise ValueError("every block needs at least one row")
        if window_blocks < 1:
            raise ValueError("window_blocks must be at least 1")
        self.sizes = np.asarray(block_sizes, dtype=np.int64)
        self.starts = np.concatenate([[0], np.cumsum(self.sizes)[:-1]])
        self.num_rows = int(self.sizes.sum())
        self.seed, self.window_blocks = seed, window_blocks
        self._plan_epoch: int | None = None
        self._blocks = np.empty(0, dtype=np.int64)
        self._window_starts = np.empty(0, dtype=np.int64)
        self._windows: OrderedDict[tuple[int, int], np.ndarray] = OrderedDict()

    def _plan(self, epoch: int) -> None:
        """Block permutation and where each window starts in the epoch's sequence."""
        if self._plan_epoch == epoch:
            return
        self._blocks = _seed(self.seed, epoch).permutation(len(self.sizes))
        window_rows = np.add.reduceat(self.sizes[self._blocks], np.arange(0, len(self._blocks), self.window_blocks))
        self._window_starts = np.concatenate([[0], np.cumsum(window_rows)])
        self._plan_epoch = epoch

    def _window(self, epoch: int, w: int) -> np.ndarray:
        key = (epoch, w)
        if key not in self._windows:
            blocks = self._blocks[w * self.window_blocks:(w + 1) * self.window_blocks]
            rows = np.concatenate([np.arange(self.starts[b], self.starts[b] + self.sizes[b]) for b in blocks])
            self._windows[key] = _seed(self.seed, epoch, w + 1).permutation(rows)
            while len(self._windows) > _WINDOW_CACHE:
                self._windows.popitem(last=False)
        return self._windows[key]

    def indices(self, epoch: int, start: int, stop: int) -> np.ndarray:
        """Global row indices at positions [start, stop) of the epoch's sequence."""
        self._plan(epoch)
        stop = min(stop, self.num_rows)
        out = []
        w = int(np.searchsorted(self._window_starts, start, side="right")) - 1
        while start < stop:
            w_start, w_stop = int(self._window_starts[w]), int(self._window_starts[w + 1])
            take = min(stop, w_stop)
            out.append(self._window(epoch, w)[start - w_start:take - w_start])
            start, w = take, w + 1
        return np.concatenate(out) if out else np.empty(0, dtype=np.int64)

    def block_of(self, index: int) -> int:
        """The block a global row index belongs to."""
        return int(np.searchsorted(self.starts, index, side="right")) - 1

    def next_batch(self, position: Position, global_batch: int) -> tuple[np.ndarray, Position]:
        """The next global batch's indices and the position after it (a new epoch when too few are left)."""
        if global_batch > self.num_rows:
            raise ValueError(f"a global batch of {global_batch} is larger than the {self.num_rows} rows")
        if position.consumed + global_batch > self.num_rows:
            position = Position(position.epoch + 1, 0)
        stop = position.consumed + global_batch
        return self.indices(position.epoch, position.consumed, stop), Position(position.epoch, stop)


def rank_slice(global_indices: np.ndarray, rank: int, batch_size: int) -> np.ndarray:
    """Rank r's part of a global batch: the r-th run of `batch_size` indices."""
    return global_indices[rank * batch_size:(rank + 1) * batch_size]
