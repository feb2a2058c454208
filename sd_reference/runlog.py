"""A run's training log: JSON lines (steps, checkpoints, resumes) in the run directory, on any storage.

Rank 0 sends records to a `RunLog` actor that the driver starts (on the driver's
node), so the driver shows progress on any cluster without sharing a disk with the
workers. The actor makes them durable: appended to `train_log.jsonl` where the file
system can append (local disks, HDFS), else written as numbered parts
`train_log.parts/NNNNNNNN.jsonl` (object stores cannot append), at most every
`flush_s` seconds and at every checkpoint and at the end. `read` returns both in
order; a torn line (a killed writer) is skipped.
"""

from __future__ import annotations

import json
import time
from typing import Any

from sd_reference import storage

LOG_FILE = "train_log.jsonl"
PARTS_DIR = "train_log.parts"


def parse_lines(text: str) -> list[dict[str, Any]]:
    out = []
    for line in text.splitlines():
        try:
            record = json.loads(line)
        except ValueError:
            continue
        if isinstance(record, dict):
            out.append(record)
    return out


def read(run_uri: str) -> list[dict[str, Any]]:
    """Every record of a run's log, oldest first (the appended file, then the parts)."""
    records = []
    log = storage.join(run_uri, LOG_FILE)
    if storage.exists(log):
        records += parse_lines(storage.read_text(log))
    parts = storage.join(run_uri, PARTS_DIR)
    for name in storage.list_dir(parts):
        if name.endswith(".jsonl"):
            records += parse_lines(storage.read_text(storage.join(parts, name)))
    return records


def read_file_or_run(uri: str) -> list[dict[str, Any]]:
    """A log given as its run directory or as a JSON-lines file."""
    if storage.is_dir(uri):
        return read(uri)
    return parse_lines(storage.read_text(uri))


class RunLog:
    """Ray actor (num_cpus=0): receives rank 0's records, keeps them for the driver, writes them durably."""

    def __init__(self, run_uri: str, flush_s: float = 10.0) -> None:
        self.run_uri, self.flush_s = run_uri, flush_s
        self.records: list[dict[str, Any]] = []
        self._pending: list[str] = []
        self._last_flush = time.monotonic()
        self._append: bool | None = None  # decided on the first flush
        names = [n for n in storage.list_dir(storage.join(run_uri, PARTS_DIR)) if n.endswith(".jsonl")]
        self._next_part = 1 + max((int(n.split(".")[0]) for n in names if n.split(".")[0].isdigit()), default=0)

    def write(self, record: dict[str, Any]) -> None:
        record = dict(record, time=round(time.time(), 3))
        self.records.append(record)
        self._pending.append(json.dumps(record) + "\n")
        # Appendable storage: every record at once; object stores: parts, on events or every flush_s.
        if self._append is not False or record.get("event") or time.monotonic() - self._last_flush >= self.flush_s:
            self.flush()

    def flush(self) -> None:
        if not self._pending:
            return
        text = "".join(self._pending)
        if self._append is None or self._append:
            self._append = storage.append_text(storage.join(self.run_uri, LOG_FILE), text)
        if not self._append:
            part = storage.join(self.run_uri, PARTS_DIR, f"{self._next_part:08d}.jsonl")
            storage.write_text(part, text)
            self._next_part += 1
        self._pending.clear()
        self._last_flush = time.monotonic()

    def since(self, offset: int) -> list[dict[str, Any]]:
        """Records from number `offset` on (the driver's progress poll)."""
        return self.records[offset:]
