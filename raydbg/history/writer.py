"""Appends entries to jobs' records from a background thread with a bounded buffer (runs in the gateway agent).

`add()` never blocks and never raises: the job is never slowed or failed by its record. A
thread flushes every `flush_s` (1 s to a local directory, 5 s to an object store): each job's
new lines go to its current segment (one writer per file: the segment's name carries this
writer's id) and its manifest is rewritten. A store that is down is retried with back-off;
lines wait in the buffer meanwhile, and beyond `max_pending` new ones are dropped and counted
(a `gap` entry says how many once the store is back). `state()` is what `raydbg status` prints.
"""

from __future__ import annotations

import json
import logging
import os
import secrets
import threading
import time
from collections import deque
from dataclasses import dataclass, field
from typing import Any

from raydbg.history.store import MANIFEST, Store, checked_job, describe
from raydbg.version import __version__

log = logging.getLogger("raydbg.history")


@dataclass
class _Job:
    segment: str = ""
    size: int = 0
    opened: float = 0.0
    manifest: dict[str, Any] = field(default_factory=dict)
    loaded: bool = False
    dirty: bool = False


class HistoryWriter:
    def __init__(self, store: Store, flush_s: float | None = None, max_pending: int = 20000,
                 segment_max: int | None = None, segment_age_s: float = 600.0) -> None:
        self.store = store
        remote = type(store).__name__ != "LocalStore"
        # A local append is cheap: each second (a dying cluster loses little); an object store: every 5 s.
        self.flush_s = flush_s or (5.0 if remote else 1.0)
        self.max_pending = max_pending
        # A remote segment is rewritten whole at each flush: keep it small; a local one is appended to.
        self.segment_max = segment_max or ((1 << 20) if remote else (16 << 20))
        self.segment_age_s = segment_age_s if remote else float("inf")
        self.id = secrets.token_hex(4)
        self._pending: deque[tuple[str, bytes]] = deque()
        self._lock = threading.Lock()
        self._flush_lock = threading.Lock()
        self._jobs: dict[str, _Job] = {}
        self._seq = 0
        self.dropped = 0
        self._dropped_unsaid: dict[str, int] = {}
        self.written = 0
        self.error: str | None = None
        self.error_since: float | None = None
        self.last_write: float | None = None
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    # --- the producer's side: never blocks, never raises ---------------------------------------
    def add(self, job: str, kind: str, data: dict[str, Any], ts: float | None = None, record: str | None = None) -> bool:
        """Queue one entry of Ray job `job` for the record `record` (its folder; default: `job`);
        False when the buffer is full (it is counted)."""
        try:
            record = checked_job(record or job)
            line = json.dumps({"ts": time.time() if ts is None else ts, "kind": kind, "job_id": job, "data": data},
                              default=str, separators=(",", ":")).encode() + b"\n"
        except Exception:
            log.debug("raydbg history: entry not recorded", exc_info=True)
            return False
        with self._lock:
            if len(self._pending) >= self.max_pending:
                self.dropped += 1
                self._dropped_unsaid[record] = self._dropped_unsaid.get(record, 0) + 1
                return False
            self._pending.append((record, line))
        return True

    def pending(self) -> int:
        with self._lock:
            return len(self._pending)

    # --- the thread --------------------------------------------------------------------------------
    def start(self) -> HistoryWriter:
        self._thread = threading.Thread(target=self._loop, name="raydbg-history", daemon=True)
        self._thread.start()
        return self

    def stop(self, timeout: float = 10.0) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout)
        self.flush()

    def _loop(self) -> None:
        failures = 0
        while not self._stop.wait(min(60.0, self.flush_s * (2 ** min(failures, 4)))):
            failures = 0 if self.flush() else failures + 1

    def flush(self) -> bool:
        """Write what is pending; True when the store took it all (or there was nothing)."""
        with self._flush_lock:
            with self._lock:
                for rec, n in self._dropped_unsaid.items():  # said once, in the record itself (a few over the bound)
                    self._pending.append((rec, json.dumps({"ts": time.time(), "kind": "gap", "job_id": "",
                                                           "data": {"dropped": n}}).encode() + b"\n"))
                self._dropped_unsaid.clear()
                batch = list(self._pending)
            by_job: dict[str, list[bytes]] = {}
            for job, line in batch:
                by_job.setdefault(job, []).append(line)
            done = 0
            try:
                for job, lines in by_job.items():
                    self._write_job(job, lines)
                    done += len(lines)
                    self._forget(job, len(lines))
                self.written += done
                self.last_write = time.time()
                self.error = self.error_since = None
                return True
            except Exception as exc:
                if self.error is None:
                    self.error_since = time.time()
                    log.warning("raydbg history: %s unreachable, will retry: %s", describe(self.store), exc)
                self.error = f"{type(exc).__name__}: {exc}"[:300]
                return False

    def _forget(self, job: str, n: int) -> None:
        """Drop the first `n` pending lines of `job` (written; new ones may have come meanwhile)."""
        with self._lock:
            kept: deque[tuple[str, bytes]] = deque()
            for item in self._pending:
                if item[0] == job and n > 0:
                    n -= 1
                    continue
                kept.append(item)
            self._pending = kept

    def _write_job(self, job: str, lines: list[bytes]) -> None:
        j = self._jobs.setdefault(job, _Job())
        if not j.loaded:
            j.manifest = self._read_manifest(job)
            j.loaded = True
        chunk = b"".join(lines)
        now = time.time()
        if not j.segment or j.size + len(chunk) > self.segment_max or now - j.opened > self.segment_age_s:
            self._roll(job, j, now)
        try:
            self.store.append(job, j.segment, chunk, j.size)
        except Exception:
            self._roll(job, j, now)  # a short or failed write: the next try goes to a new segment
            raise
        j.size += len(chunk)
        self._note(j, job, lines)
        self.store.replace(job, MANIFEST, json.dumps(j.manifest, sort_keys=True).encode())

    def _roll(self, job: str, j: _Job, now: float) -> None:
        if j.segment:
            self.store.close(job, j.segment)
        self._seq += 1
        j.segment, j.size, j.opened = f"seg-{int(now * 1000):013d}-{self.id}-{self._seq % 10000:04d}.jsonl", 0, now

    def _read_manifest(self, job: str) -> dict[str, Any]:
        """An earlier writer's manifest, merged into (a gateway restarted); fresh if none."""
        fresh: dict[str, Any] = {"job_id": "", "record": job, "first_ts": 0.0, "last_ts": 0.0, "runs": [], "counts": {},
                                 "version": __version__}
        try:
            old = json.loads(self.store.read(job, MANIFEST))
            if isinstance(old, dict) and old.get("record", job) == job:
                fresh.update({k: old[k] for k in ("job_id", "first_ts", "runs", "counts") if k in old})
        except Exception:
            pass
        return fresh

    @staticmethod
    def _note(j: _Job, job: str, lines: list[bytes]) -> None:
        m = j.manifest
        for line in lines:
            try:
                e = json.loads(line)
            except ValueError:
                continue
            m["job_id"] = m["job_id"] or e["job_id"]
            m["first_ts"] = min(m["first_ts"] or e["ts"], e["ts"])
            m["last_ts"] = max(m["last_ts"], e["ts"])
            m["counts"][e["kind"]] = m["counts"].get(e["kind"], 0) + 1
            run = (e.get("data") or {}).get("train_run") or (e.get("data") or {}).get("run")
            if e["kind"] in ("attempt", "steps") and isinstance(run, str) and run not in m["runs"]:
                m["runs"].append(run)

    # --- what `raydbg status` says -------------------------------------------------------------
    def state(self) -> dict[str, Any]:
        return {"where": describe(self.store), "ok": self.error is None, "error": self.error,
                "error_since": self.error_since, "pending": self.pending(), "dropped": self.dropped,
                "written": self.written, "last_write": self.last_write, "pid": os.getpid()}


def status_line(state: dict[str, Any] | None, now: float | None = None) -> str:
    """One line for `raydbg status`."""
    if not state:
        return "history: not recorded (the gateway has no history writer)"
    now = time.time() if now is None else now
    if state.get("ok"):
        ago = "" if not state.get("last_write") else f", last write {now - state['last_write']:.0f}s ago"
        return f"history: recording to {state['where']} ({state['written']} entries{ago})"
    since = now - float(state.get("error_since") or now)
    return (f"history: {state['where']} unreachable for {since:.0f}s, retrying ({state['pending']} entries waiting, "
            f"{state['dropped']} dropped): {state.get('error')}")


_current: HistoryWriter | None = None


def current() -> HistoryWriter | None:
    """This process's writer (the gateway's), if one runs."""
    return _current


def start(store: Store, **kw: Any) -> HistoryWriter:
    global _current
    if _current is None:
        _current = HistoryWriter(store, **kw).start()
    return _current
