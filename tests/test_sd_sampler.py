"""sd_reference's data order and offline feed without Ray: determinism, exact resume, other worker counts."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from sd_reference.feed import Feed, Shard
from sd_reference.sampler import EpochOrder, Position, rank_slice

BLOCKS = [5, 5, 5, 3, 5, 5, 4]  # row groups of uneven size, like the tail of a shard


def _epoch(order: EpochOrder, epoch: int) -> np.ndarray:
    return order.indices(epoch, 0, order.num_rows)


def test_each_epoch_is_a_seeded_permutation() -> None:
    a, b = EpochOrder(BLOCKS, seed=3, window_blocks=2), EpochOrder(BLOCKS, seed=3, window_blocks=2)
    e0, e1 = _epoch(a, 0), _epoch(a, 1)
    assert sorted(e0.tolist()) == list(range(sum(BLOCKS))) == sorted(e1.tolist())
    assert not np.array_equal(e0, e1)  # a new order each epoch
    assert np.array_equal(e0, _epoch(b, 0)) and np.array_equal(e1, _epoch(b, 1))  # same seed, same order
    assert not np.array_equal(e0, _epoch(EpochOrder(BLOCKS, seed=4, window_blocks=2), 0))
    # Slices agree with the whole, whatever the window boundaries and the cache hold.
    assert np.array_equal(np.concatenate([a.indices(0, i, i + 7) for i in range(0, 32, 7)]), e0)


def test_rows_are_shuffled_within_windows_of_blocks() -> None:
    order = EpochOrder(BLOCKS, seed=0, window_blocks=2)
    seq = _epoch(order, 0)
    blocks = [order.block_of(int(i)) for i in seq]
    # A window holds the rows of 2 whole blocks: the first window is all of two blocks' rows, mixed.
    b0, b1 = blocks[0], next(b for b in blocks if b != blocks[0])
    first_window = BLOCKS[b0] + BLOCKS[b1]
    assert set(blocks[:first_window]) == {b0, b1}
    assert blocks[:first_window] != sorted(blocks[:first_window])  # interleaved, not block after block


def _run(order: EpochOrder, position: Position, steps: int, batch: int, world: int) -> tuple[list[list[int]], Position]:
    seen = []
    for _ in range(steps):
        indices, position = order.next_batch(position, batch * world)
        seen.append([int(i) for r in range(world) for i in rank_slice(indices, r, batch)])
    return seen, position


def test_resume_from_a_saved_position_sees_the_same_samples() -> None:
    order = EpochOrder(BLOCKS, seed=1, window_blocks=3)
    whole, _ = _run(order, Position(), steps=12, batch=3, world=2)  # 32 rows, 6 per step: 5 steps per epoch
    first, saved = _run(order, Position(), steps=7, batch=3, world=2)
    rest, _ = _run(EpochOrder(BLOCKS, seed=1, window_blocks=3), Position.from_json(saved.to_json()), 5, 3, 2)
    assert first + rest == whole
    assert saved == Position(epoch=1, consumed=12)
    # Within an epoch no sample repeats; the 2 left over (32 = 5 x 6 + 2) are dropped, like drop_last.
    epoch0 = [i for step in whole[:5] for i in step]
    assert len(set(epoch0)) == 30


def test_resume_on_another_worker_count_continues_the_same_sequence() -> None:
    order = EpochOrder(BLOCKS, seed=2, window_blocks=2)
    sequence = _epoch(order, 0).tolist()
    before, saved = _run(order, Position(), steps=2, batch=3, world=2)  # 12 samples on 2 workers
    after, end = _run(order, saved, steps=6, batch=3, world=1)  # then 1 worker: 3 per step
    seen = [i for step in before + after for i in step]
    assert seen == sequence[:30]  # exactly the next samples: none twice, none skipped
    assert end == Position(0, 30)


def test_a_global_batch_larger_than_the_data_is_refused() -> None:
    with pytest.raises(ValueError, match="larger than"):
        EpochOrder([4], seed=0).next_batch(Position(), 5)


def _write_shard(path: Path, keys: list[str], rows_per_group: int) -> Shard:
    """A latent shard laid out as Ray Data writes it: fixed-shape tensors as large lists plus their shape."""
    n = len(keys)
    latents = np.arange(n * 4 * 2 * 2, dtype=np.float16).reshape(n, 4, 2, 2)
    text = np.ones((n, 3, 2), dtype=np.float16) * np.arange(n, dtype=np.float16)[:, None, None]

    def tensor_field(name: str, array: np.ndarray) -> tuple[pa.Field, pa.Array]:
        values = pa.array(array.reshape(-1))
        offsets = pa.array(np.arange(0, array.size + 1, array[0].size, dtype=np.int64))
        column = pa.LargeListArray.from_arrays(offsets, values)
        meta = {b"ARROW:extension:name": b"ray.data.arrow_tensor_v2",
                b"ARROW:extension:metadata": str(list(array.shape[1:])).encode()}
        return pa.field(name, column.type, metadata=meta), column

    fields, columns = zip(*[(pa.field("key", pa.string()), pa.array(keys)), tensor_field("latents", latents),
                            tensor_field("text_emb", text)], strict=True)
    pq.write_table(pa.Table.from_arrays(list(columns), schema=pa.schema(list(fields))), path,
                   row_group_size=rows_per_group)
    meta = pq.ParquetFile(path).metadata
    return Shard(str(path), [meta.row_group(i).num_rows for i in range(meta.num_row_groups)])


def test_feed_reads_each_ranks_samples_from_row_groups(tmp_path: Path) -> None:
    shards = [_write_shard(tmp_path / "a.parquet", [f"a{i}" for i in range(7)], 3),
              _write_shard(tmp_path / "b.parquet", [f"b{i}" for i in range(5)], 3)]
    assert [s.row_groups for s in shards] == [[3, 3, 1], [3, 2]]
    keys = [f"a{i}" for i in range(7)] + [f"b{i}" for i in range(5)]
    order = EpochOrder([3, 3, 1, 3, 2], seed=5, window_blocks=2)
    feeds = [Feed(shards, seed=5, position=Position(), batch_size=2, rank=r, world=2, window_blocks=2, cache_mib=1)
             for r in range(2)]
    position = Position()
    try:
        for _ in range(8):  # 3 steps per epoch: crosses two epoch boundaries
            expected, position = order.next_batch(position, 4)
            for r, feed in enumerate(feeds):
                batch = feed.next()
                mine = rank_slice(expected, r, 2)
                assert batch.keys == [keys[int(i)] for i in mine]
                assert batch.position == position
                assert tuple(batch.tensors["latents"].shape) == (2, 4, 2, 2)
                # The row's own tensors: text_emb holds the row's index within its file.
                for k, row in zip(batch.keys, batch.tensors["text_emb"], strict=True):
                    assert float(row[0, 0]) == int(k[1:])
    finally:
        for feed in feeds:
            feed.close()
