"""What a function's tasks need at their peak, learned on this node, for the start gate.

Why: Ray starts as many tasks as there are CPUs, whatever they will allocate. When a
function's tasks together outgrow the node, a monitor can only kill (Ray's does, in
every wave of work). Once the node has seen how far a function's tasks grow, the start
gate (start_gate.py) can hold the next one at its start until that fits, so the second and
later waves of a big-memory function need no kill at all.

The monitor (monitor.py) observes, whenever it scans processes (near the threshold, in
decision rounds, and while a task of a big function runs: see `following`): each busy
worker's anonymous memory, counted toward the function its local record names
(node_files.py). The learned peak of a function is the most any of its tasks held on this
node: for a killed attempt a lower bound, which is still the best guess. A peak is
*complete* once a task of the function was seen to end on its own (its worker, still
alive, moved on to something else): only then is it the function's true need rather
than how far its tasks had got. Only functions whose tasks reach
`min_fraction` of the node limit are published (`<run dir>/peaks-<node_id>`, JSON
{"peaks": {function id: bytes}, "complete": [function id, ...]}): small tasks never pay
for the admission path.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Any

from raydbg.memory import node_files


def peaks_path(node_id: str, directory: Path | None = None) -> Path:
    return (directory or node_files.run_dir()) / f"peaks-{node_id}"


class PeakLearner:
    """The monitor's side: observe per-process memory, publish the big functions' peaks."""

    def __init__(self, path: Path | None, min_fraction: float = 0.05, every_s: float = 0.25):
        self.path = path
        self.min_fraction = min_fraction
        self.every_s = every_s
        self.peaks: dict[str, int] = {}  # function id -> most memory seen
        self.complete: set[str] = set()  # functions a task of which was seen to end
        self._running: dict[int, tuple[str, str]] = {}  # pid -> (task id, function id)
        self._published: dict[str, Any] = {}
        self._last_publish = -1e9

    def observe(
        self, memory: dict[int, int], recs: dict[int, dict[str, Any]], titles: dict[int, str]
    ) -> None:
        """`memory`: pid -> bytes of the node's processes; `recs`: local records;
        `titles`: pid -> ray::<title>."""
        running: dict[int, tuple[str, str]] = {}
        for pid, r in recs.items():
            fn = r.get("fn")
            title = titles.get(pid)
            # Only a worker that still runs the recorded task (its title names it) and is
            # not held at its start (it holds nothing of the task yet).
            if not fn or r.get("held") or title is None or pid not in memory:
                continue
            if not node_files.matches_title(str(r.get("name", "")), title):
                continue
            running[pid] = (str(r.get("task_id")), fn)
            if memory[pid] > self.peaks.get(fn, 0):
                self.peaks[fn] = memory[pid]
        for pid, (task_id, fn) in self._running.items():
            # Ended on its own: the worker lives on without that task (a killed one is gone).
            if pid in memory and running.get(pid, ("", ""))[0] != task_id:
                self.complete.add(fn)
        self._running = running

    def following(self, limit: int) -> bool:
        """Did the last observation see a task of a big function running? Then the monitor
        keeps scanning, however calm the node: the task's peak and its end (which makes
        the peak complete) must be seen. Unseen, the gate admits the next wave on a lower
        bound: three 730 MiB tasks on a 665 MiB peak where two fit, and a kill."""
        return any(self._big(self.peaks.get(fn, 0), limit) for _, fn in self._running.values())

    def _big(self, peak: int, limit: int) -> bool:
        """A peak worth the gate's admission path (and following)."""
        return peak >= self.min_fraction * limit

    def note(self, function_id: str, memory: int) -> None:
        """A task of `function_id` was seen holding `memory` (a decision round's candidate)."""
        if memory > self.peaks.get(function_id, 0):
            self.peaks[function_id] = memory

    def publish(self, limit: int, now: float | None = None) -> bool:
        """Write the big functions' peaks when they changed (at most every `every_s`)."""
        now = time.monotonic() if now is None else now
        if self.path is None or now - self._last_publish < self.every_s:
            return False
        peaks = {fn: b for fn, b in self.peaks.items() if self._big(b, limit)}
        big = {"peaks": peaks, "complete": sorted(self.complete & set(peaks))}
        if big == self._published:
            return False
        self._last_publish = now
        try:
            node_files.ensure_run_dir(self.path.parent)
            tmp = self.path.with_name(self.path.name + f".{os.getpid()}")
            node_files.write_file(tmp, json.dumps(big))
            os.replace(tmp, self.path)  # readers never see half a file
        except OSError:
            return False
        self._published = big
        return True


class PeakTable:
    """The gate's side: the node's published peaks, re-read at most every `every_s`."""

    def __init__(self, path: Path | str | None, every_s: float = 0.25) -> None:
        self.path = path
        self.every_s = every_s
        self.peaks: dict[str, int] = {}
        self.complete: set[str] = set()
        self._checked = -1e9
        self._mtime = 0.0

    def get(self, function_id: str) -> int:
        """Learned peak of the function (0: not a big one, or unknown); one clock read
        per call in the common case (this runs at every task start)."""
        if self.path is None or not function_id:
            return 0
        now = time.monotonic()
        if now - self._checked >= self.every_s:
            self._checked = now
            self._reload()
        return self.peaks.get(function_id, 0)

    def is_complete(self, function_id: str) -> bool:
        """Was a task of it seen to end on its own (its peak is its need, not a lower
        bound)? As of the last get()."""
        return function_id in self.complete

    def _reload(self) -> None:
        try:
            mtime = os.stat(self.path).st_mtime  # type: ignore[arg-type]
        except OSError:
            self.peaks, self._mtime = {}, 0.0
            return
        if mtime == self._mtime:
            return
        try:
            got = json.loads(Path(self.path).read_text())  # type: ignore[arg-type]
            self.peaks = {str(k): int(v) for k, v in got["peaks"].items()}
            self.complete = {str(f) for f in got.get("complete", ())}
            self._mtime = mtime
        except (OSError, ValueError, AttributeError, KeyError, TypeError):
            pass
