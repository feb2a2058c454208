"""Tails the head node's embedded telemetry files for the spans goodput needs (runs in the gateway agent).

Only complete lines, only spans of a Train run (attribute `train.run.id`), each with its
file's resource. A rotated file starts over from its beginning; what was written between
the last look and a rotation is not copied (files rotate at tens of MiB, looks are seconds apart).
"""

from __future__ import annotations

import glob
import json
import os
from typing import Any

from raydbg import private_dir

MAX_READ = 4 << 20  # per file per look


class SpanTail:
    def __init__(self, directory: str | None) -> None:
        self.directory = directory
        self._at: dict[str, tuple[int, int]] = {}  # path -> (inode, offset)
        self._resource: dict[str, dict[str, Any]] = {}

    def new_spans(self) -> list[dict[str, Any]]:
        if not self.directory or not os.path.isdir(self.directory):
            return []
        out: list[dict[str, Any]] = []
        for path in sorted(glob.glob(os.path.join(self.directory, "*.jsonl"))):
            try:
                out += self._read(path)
            except (OSError, ValueError):
                continue
        return out

    def _read(self, path: str) -> list[dict[str, Any]]:
        with os.fdopen(private_dir.open_own_file(path), "rb") as f:
            st = os.fstat(f.fileno())
            inode, offset = self._at.get(path, (st.st_ino, 0))
            if inode != st.st_ino or st.st_size < offset:
                offset = 0
            f.seek(offset)
            data = f.read(MAX_READ)
        end = data.rfind(b"\n") + 1  # a line still being written waits for the next look
        self._at[path] = (st.st_ino, offset + end)
        out = []
        for line in data[:end].splitlines():
            try:
                rec = json.loads(line)
            except ValueError:
                continue
            if rec.get("type") == "resource":
                self._resource[path] = rec.get("attributes", {})
            elif rec.get("type") == "span" and "train.run.id" in (rec.get("attributes") or {}):
                out.append(dict(rec, resource=self._resource.get(path, {})))
        return out


def job_of(span: dict[str, Any]) -> str:
    return str((span.get("attributes") or {}).get("ray.job_id") or (span.get("resource") or {}).get("ray.job_id") or "")
