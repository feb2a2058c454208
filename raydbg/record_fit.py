"""Fits a record under the readers' size cap (validate.MAX_RECORD_BYTES) by cutting its largest parts, with markers; pure, runs in whichever process writes a record.

Every reader drops a record over the cap, so a writer that wrote one would lose it (a pause
whose snapshot nobody can list) and leave it behind. registry.put fits every record it
writes here. The cut goes where the bytes are:
- a container whose largest part alone can give up the excess cuts only that part;
- a list keeps its head (innermost frames, first classes, lowest ranks) and ends with a
  marker saying how many items were cut; its first item is cut itself if it must;
- an object cuts its largest values first, then (never the record's own top-level fields)
  drops its last entries, with a "..." entry saying how many;
- a text keeps its start and says how many characters were cut.
"""

from __future__ import annotations

import json
from typing import Any

from raydbg.record_rules import CUT_NOTE as NOTE
from raydbg.validate import MAX_RECORD_BYTES

MARKER_KEY = "..."
FLOOR = 128  # encoded bytes a cut part keeps at least
_ROUNDS = 8


class TooLarge(ValueError):
    """A record that cannot be cut under the cap (its top-level fields alone are over it)."""


def encode(value: Any) -> bytes:
    return json.dumps(value).encode()


def fit(record: dict[str, Any], limit: int = MAX_RECORD_BYTES) -> bytes:
    """`record` as JSON of at most `limit` bytes: as it is when it fits, else cut (a copy)."""
    data = encode(record)
    if len(data) <= limit:
        return data
    holder = {"record": json.loads(data)}  # a private copy to cut, plain JSON
    for _ in range(_ROUNDS):
        # Separators and markers make the estimate inexact: a little more, and round again if short.
        saved = _cut(holder, "record", len(data) - limit + 64, root=True)
        data = encode(holder["record"])
        if len(data) <= limit:
            return data
        if saved <= 0:
            break  # nothing left that may be cut
    raise TooLarge(f"record of {len(data)} bytes cannot be cut under {limit}")


def _size(value: Any) -> int:
    return len(json.dumps(value))


def _cut(parent: Any, key: Any, excess: int, root: bool = False) -> int:
    """Make `parent[key]` at least `excess` bytes smaller where it can; the bytes saved."""
    value = parent[key]
    if isinstance(value, str):
        return _cut_text(parent, key, excess)
    if isinstance(value, list):
        return _cut_list(value, excess)
    if isinstance(value, dict):
        return _cut_object(value, excess, root)
    return 0


def _cut_text(parent: Any, key: Any, excess: int) -> int:
    text = parent[key]
    size = _size(text)
    if size <= FLOOR:
        return 0
    target = max(FLOOR, size - excess)
    note = f"... [{{}} characters {NOTE}]"
    keep = max(0, len(text) * (target - len(note) - 8) // size)
    cut = text[:keep] + note.format(len(text) - keep)
    parent[key] = cut
    return size - _size(cut)


def _absorbed_by_largest(node: Any, keys: list[Any], sizes: list[int], excess: int) -> int | None:
    """The bytes saved when the largest part alone can give up `excess`; None when it cannot."""
    if not keys:
        return None
    largest = max(range(len(keys)), key=lambda i: sizes[i])
    if sizes[largest] - FLOOR < excess:
        return None
    return _cut(node, keys[largest], excess)


def _cut_list(items: list[Any], excess: int) -> int:
    sizes = [_size(x) for x in items]
    saved = _absorbed_by_largest(items, list(range(len(items))), sizes, excess)
    if saved is not None:
        return saved
    objects = all(isinstance(x, dict) for x in items)

    def marker(n: int) -> Any:
        text = f"{n} more {NOTE}"
        return {MARKER_KEY: text} if objects else f"... {text}"

    keep, removed = len(items), 0
    while keep > 1 and removed - _size(marker(len(items) - keep)) - 2 < excess:
        keep -= 1
        removed += sizes[keep] + 2
    if keep == len(items):
        return 0
    dropped = len(items) - keep
    del items[keep:]
    items.append(marker(dropped))
    saved = removed - _size(items[-1]) - 2
    if saved < excess and items:
        saved += _cut(items, 0, excess - saved)
    return saved


def _cut_object(node: dict[str, Any], excess: int, root: bool) -> int:
    keys = list(node)
    sizes = [_size(node[k]) for k in keys]
    saved = _absorbed_by_largest(node, keys, sizes, excess)
    if saved is not None:
        return saved
    saved = 0
    # Largest first; of equal ones the later first (the head of a structure matters most).
    for i in sorted(range(len(keys)), key=lambda i: (-sizes[i], -i)):
        if saved >= excess or sizes[i] <= FLOOR:
            break
        saved += _cut(node, keys[i], excess - saved)
    if saved >= excess or root:
        return saved
    dropped = 0
    while node and saved < excess + FLOOR:
        key = next(reversed(node))
        saved += _size(key) + _size(node.pop(key)) + 4
        dropped += 1
    if dropped:
        node[MARKER_KEY] = f"{dropped} more entries {NOTE}"
        saved -= _size(MARKER_KEY) + _size(node[MARKER_KEY]) + 4
    return saved
