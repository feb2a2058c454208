"""Reads jobs' records back with no cluster (runs in `raydbg history` and the TUI): lists jobs, loads one.

Every line is checked against schema.HistoryEntry; a torn last line (a writer killed
mid-write) and any line that is not an entry are skipped and counted, never fatal.
"""

from __future__ import annotations

from typing import Any

import msgspec

from raydbg import schema
from raydbg.history.store import MANIFEST, SEGMENT_NAME, Store, StoreError, checked_job

_ENTRY = msgspec.json.Decoder(schema.HistoryEntry)
_MANIFEST = msgspec.json.Decoder(schema.HistoryManifest)


def parse(data: bytes) -> tuple[list[dict[str, Any]], int]:
    """(entries, lines skipped) of one segment: a last line with no newline is torn."""
    lines = data.split(b"\n")
    skipped = 1 if lines[-1].strip() else 0  # no newline at the end: the line in flight when the writer died
    out = []
    for line in lines[:-1]:
        if not line.strip():
            continue
        try:
            out.append(msgspec.to_builtins(_ENTRY.decode(line)))
        except (msgspec.DecodeError, msgspec.ValidationError):
            skipped += 1
    return out, skipped


def manifest(store: Store, record: str) -> dict[str, Any]:
    """The record's manifest; a bare one when it is missing or unreadable (the segments still count)."""
    try:
        found = msgspec.to_builtins(_MANIFEST.decode(store.read(record, MANIFEST)))
    except Exception:
        found = msgspec.to_builtins(schema.HistoryManifest(job_id=""))
    return dict(found, record=record, job_id=found["job_id"] or record)


def jobs(store: Store) -> list[dict[str, Any]]:
    """Every record's manifest, newest first."""
    found = [manifest(store, record) for record in store.jobs()]
    found.sort(key=lambda m: m.get("last_ts") or 0.0, reverse=True)
    return found


def resolve(store: Store, name: str) -> str:
    """The record `name` names, the newest when several match: a record (folder) name, a Ray job
    id, a Train run's name, or a prefix of a record's name."""
    listed = jobs(store)
    for pick in (lambda m: m["record"] == name, lambda m: m["job_id"] == name,
                 lambda m: name in (m.get("runs") or []), lambda m: m["record"].startswith(name)):
        hits = [m["record"] for m in listed if pick(m)]
        if hits:
            return hits[0]
    known = ", ".join(m["record"] for m in listed[:5]) or "none"
    raise StoreError(f"raydbg history: no job or run {name[:80]!r} in {store.where} (newest: {known})")


def load(store: Store, record: str) -> dict[str, Any]:
    """A record whole: its manifest, entries in time order, and how many lines were skipped."""
    checked_job(record)
    entries: list[dict[str, Any]] = []
    skipped = 0
    for name in sorted(n for n in store.names(record) if SEGMENT_NAME.fullmatch(n)):
        try:
            got, bad = parse(store.read(record, name))
        except OSError:
            skipped += 1  # a segment we must not read (not ours, a link): said in the count
            continue
        entries += got
        skipped += bad
    entries.sort(key=lambda e: e["ts"])
    m = manifest(store, record)
    return {"job_id": m["job_id"], "record": record, "where": store.where, "manifest": m, "entries": entries,
            "skipped_lines": skipped}
