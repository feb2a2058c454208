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


def manifest(store: Store, job: str) -> dict[str, Any]:
    """The job's manifest; a bare one when it is missing or unreadable (the segments still count)."""
    try:
        return dict(msgspec.to_builtins(_MANIFEST.decode(store.read(job, MANIFEST))), job_id=job)
    except Exception:
        return msgspec.to_builtins(schema.HistoryManifest(job_id=job))  # type: ignore[no-any-return]


def jobs(store: Store) -> list[dict[str, Any]]:
    """Every job's manifest, newest first."""
    found = [manifest(store, job) for job in store.jobs()]
    found.sort(key=lambda m: m.get("last_ts") or 0.0, reverse=True)
    return found


def resolve(store: Store, name: str) -> str:
    """The job `name` names: a job id, a Train run's name (its newest job), or a job id prefix."""
    listed = jobs(store)
    for pick in (lambda m: m["job_id"] == name, lambda m: name in (m.get("runs") or []),
                 lambda m: m["job_id"].startswith(name)):
        hits = [m["job_id"] for m in listed if pick(m)]
        if hits:
            return hits[0]
    known = ", ".join(m["job_id"] for m in listed[:5]) or "none"
    raise StoreError(f"raydbg history: no job or run {name[:80]!r} in {store.where} (newest jobs: {known})")


def load(store: Store, job: str) -> dict[str, Any]:
    """A job's whole record: its manifest, entries in time order, and how many lines were skipped."""
    checked_job(job)
    entries: list[dict[str, Any]] = []
    skipped = 0
    for name in sorted(n for n in store.names(job) if SEGMENT_NAME.fullmatch(n)):
        try:
            got, bad = parse(store.read(job, name))
        except OSError:
            skipped += 1  # a segment we must not read (not ours, a link): said in the count
            continue
        entries += got
        skipped += bad
    entries.sort(key=lambda e: e["ts"])
    return {"job_id": job, "where": store.where, "manifest": manifest(store, job), "entries": entries,
            "skipped_lines": skipped}
