"""The memory monitor loop: measure, decide (policy.py), kill, explain (monitor side: runs in the monitor's process, service.py).

Everything with side effects is injected (`kill`, `record_event`, `who`, clock) so the
agent can run it in a thread (`run()`), an asyncio task (`await asyncio.to_thread`
per `poll()`), or a separate process (service.py), and tests can drive `poll()` by hand.
"""

from __future__ import annotations

import logging
import os
import secrets
import signal
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any, Protocol

from raydbg.memory import node_files, settings
from raydbg.memory.events import Metrics, kill_event
from raydbg.memory.learn import PeakLearner, peaks_path
from raydbg.memory.node_memory import NodeMeasurer, NodeMemory
from raydbg.memory.policy import (
    Candidate,
    Decision,
    PolicyConfig,
    Snapshot,
    decide,
    marks,
    threshold_bytes,
    trigger_of,
)
from raydbg.memory.process_memory import ProcMem, scan
from raydbg.memory.settings import Settings
from raydbg.memory.worker_tasks import titles
from raydbg.proc_identity import pid_alive

log = logging.getLogger("raydbg.memory")

GiB = 1 << 30


@dataclass(frozen=True)
class MonitorConfig:
    mode: str = "on"  # "off", "dry-run" or "on"
    policy: PolicyConfig = field(default_factory=PolicyConfig)
    refresh_s: float = 0.25  # far from the threshold
    fast_refresh_s: float = 0.05  # near it or when growth is fast
    warm_band: float = 0.15  # "near" = within this fraction of the limit below the threshold mark
    scan_every_s: float = 0.25  # per-process scans in the warm band, or following a big task
    pending_timeout_s: float = 10.0  # stop waiting for a victim that does not exit
    # Raise the gate's flag when growth reaches the high mark within this: a task started
    # now would be among the newest when the crossing comes, i.e. the first victims.
    hold_horizon_s: float = 2.0
    dry_run_cooldown_s: float = 5.0

    @classmethod
    def current(cls) -> MonitorConfig:
        """This process's settings (settings.current(): read once, like the gate's)."""
        return cls.of(settings.current())

    @classmethod
    def of(cls, settings: Settings) -> MonitorConfig:
        return cls(
            mode=settings.monitor,
            policy=settings.policy,
            refresh_s=settings.refresh_s,
            fast_refresh_s=settings.fast_refresh_s,
            hold_horizon_s=settings.hold_horizon_s,
        )


class Who(Protocol):
    """Turns the node's processes into policy candidates (worker_tasks.Resolver in production)."""

    def candidates(
        self, procs: dict[int, ProcMem], growth: dict[int, float]
    ) -> list[Candidate]: ...


def sigkill(pid: int) -> None:
    os.kill(pid, signal.SIGKILL)


class Growth:
    """Bytes/s over a short window (least noisy: first vs last sample in the window)."""

    def __init__(self, window_s: float = 0.5) -> None:
        self.window_s = window_s
        self.samples: deque[tuple[float, int]] = deque()

    def add(self, now: float, value: int) -> float:
        self.samples.append((now, value))
        while len(self.samples) > 2 and now - self.samples[1][0] >= self.window_s:
            self.samples.popleft()
        (t0, v0) = self.samples[0]
        return (value - v0) / (now - t0) if now > t0 else 0.0


class MemoryMonitor:
    """One per node. `poll()` does one refresh and returns seconds until the next one."""

    def __init__(
        self,
        who: Who,
        kill: Callable[[int], None] = sigkill,
        record_event: Callable[[dict[str, Any]], None] = lambda e: None,
        measurer: NodeMeasurer | None = None,
        config: MonitorConfig | None = None,
        node_id: str = "",
        alive: Callable[[int], bool] | None = None,
        clock: Callable[[], float] = time.monotonic,
        on_kill: Callable[[Candidate, dict[str, Any]], None] | None = None,
    ) -> None:
        self.who = who
        self.kill = kill
        self.record_event = record_event
        self.measurer = measurer or NodeMeasurer()
        self.config = config or MonitorConfig.current()
        self.node_id = node_id
        self.alive = alive or (lambda pid: pid_alive(pid, self.measurer.roots.proc))
        self.clock = clock
        self.on_kill = on_kill
        self.pending: dict[int, float] = {}  # victim pid -> kill time
        self.event_ids: dict[int, str] = {}  # victim pid -> id of the event explaining it
        self.node_growth = Growth()
        self.proc_growth: dict[int, Growth] = {}
        self.procs: dict[int, ProcMem] = {}
        self._last_scan = -1e9
        self._last_calm: float | None = None
        self._known: dict[int, tuple[str, int, float, int]] = {}  # pid -> (comm, ppid, start..)
        self._dry_until = -1e9
        self.crossed_at: float | None = None
        self.last: NodeMemory | None = None
        self.last_decision: Decision | None = None
        self.stats: dict[str, Any] = {"polls": 0, "scans": 0, "rounds": 0, "kills": 0}
        self._stop = threading.Event()
        self._metrics = Metrics()
        # Workers of this node check it at task start (start_gate.py); None: no flag (tests).
        self.flag = node_files.flag_path(node_id) if node_id else None
        self._flag_on = False
        # Per function: the most its tasks held here (the one table of learned peaks): the
        # gate's admission, the policy's expected peaks and a killed attempt's retry room.
        self.learner = PeakLearner(peaks_path(node_id) if node_id else None)

    # -- the loop -------------------------------------------------------------------
    def run(self) -> None:
        """Poll until `stop()`; the thread that calls it is the monitor."""
        if self.flag is not None:
            node_files.set_flag(self.flag, False)  # there to map from the start (start_gate.py)
        while not self._stop.is_set():
            try:
                delay = self.poll()
            except Exception:
                log.exception("raydbg memory monitor: poll failed")
                delay = self.config.refresh_s
            self._stop.wait(delay)

    def stop(self) -> None:
        self._stop.set()
        if self.flag is not None:
            node_files.set_flag(self.flag, False)

    def _update_flag(self, node: NodeMemory, growth: float) -> None:
        """Up while the node is above the high mark ("memory") or heading there within
        `hold_horizon_s` ("trend"); the gate holds new task starts while it is up."""
        high = marks(node.limit, self.config.policy)[1]
        over = node.used >= high
        trend = not over and growth > 0 and node.used + growth * self.config.hold_horizon_s >= high
        on = over or trend
        if self.flag is not None and (on or self._flag_on):
            reason = "trend" if trend else "memory"
            node_files.set_flag(self.flag, on, f"{node.used} {node.limit} {reason}")  # fresh while on
        self._flag_on = on

    def poll(self) -> float:
        if self.config.mode == "off":
            return 1.0
        now = self.clock()
        delay = self._poll(now)
        if self.last is not None:
            # Every poll, not only after scans: the last peaks a decision round learned
            # must reach the gate even when the node calms down at once (a stale, lower
            # peak let three 730 MiB tasks in where two fit: seen).
            self.learner.publish(self.last.limit, now)
        return delay

    def _poll(self, now: float) -> float:
        cfg = self.config
        # Reap before measuring: a victim that exits between a reading and the reap would
        # leave a reading that still holds its memory, and a second, needless kill (seen).
        self._reap(now)
        node = self.measurer.read()
        self.last = node
        self.stats["polls"] += 1
        growth = self.node_growth.add(now, node.used)
        self._metrics.node(node, self.node_id)
        self._update_flag(node, growth)
        # The threshold mark in bytes (policy.threshold_bytes): min-free moves it, and with
        # it the warm band, the refresh interval and recovery.
        thr = threshold_bytes(node.limit, cfg.policy)
        warm = node.used >= thr - cfg.warm_band * node.limit or (
            growth > 0 and (node.limit - node.used) / growth < 5 * cfg.policy.horizon_s
        )
        trig = trigger_of(node.used, node.limit, growth, cfg.policy)
        if trig is None:
            self._last_calm = now
            if self.crossed_at is not None and node.used < thr:
                self._metrics.recovered(now - self.crossed_at, self.node_id)
                self.crossed_at = None
            # Near the threshold: per-worker growth fresh for a quick decision; while a big
            # function's task runs: its peak and its end (learn.py).
            follow = warm or self.learner.following(node.limit)
            if follow and now - self._last_scan >= cfg.scan_every_s:
                self._scan(now)
            return self._interval(node.used, thr, growth, warm)
        if self.crossed_at is None:
            # The crossing happened after the last calm poll: measure reaction from there
            # (an upper bound, at most one refresh interval early).
            self.crossed_at = self._last_calm if self._last_calm is not None else now
        if self.pending or now < self._dry_until:
            return cfg.fast_refresh_s  # one round in flight: wait for the victims to go
        rates = self._scan(now)
        rooms = node_files.rooms(self.flag.parent if self.flag is not None else None)
        cands = [self._known_of(c, rooms) for c in self.who.candidates(self.procs, rates)]
        snap = Snapshot(node.used, node.limit, tuple(cands), growth)
        decision = decide(snap, cfg.policy)
        self.last_decision = decision
        if decision.action == "kill":
            self._act(decision, node, growth, cands, now)
        elif decision.action == "nothing-to-kill":
            log.warning("raydbg memory monitor: %s, no killable worker", decision.message)
        return cfg.fast_refresh_s

    def _interval(self, used: int, thr: int, growth: float, warm: bool) -> float:
        cfg = self.config
        if warm:
            return cfg.fast_refresh_s
        if growth > 0:
            to_threshold = (thr - used) / growth
            return max(cfg.fast_refresh_s, min(cfg.refresh_s, to_threshold / 4))
        return cfg.refresh_s

    def _scan(self, now: float) -> dict[int, float]:
        """Per-process memory of the node's processes; returns growth (bytes/s) per pid."""
        self.procs = scan(self.measurer.pids(), self.measurer.roots, known=self._known)
        self.stats["scans"] += 1
        self._last_scan = now
        self._learn(now)
        for pid in list(self.proc_growth):
            if pid not in self.procs:
                del self.proc_growth[pid]
        return {
            pid: max(0.0, self.proc_growth.setdefault(pid, Growth()).add(now, pm.memory))
            for pid, pm in self.procs.items()
        }

    def _learn(self, now: float) -> None:
        """Count each busy worker's memory toward the function it runs (learn.py)."""
        recs = node_files.read_running(list(self.procs))
        if recs:
            memory = {pid: pm.memory for pid, pm in self.procs.items()}
            self.learner.observe(memory, recs, titles(recs, self.measurer.roots))

    def _known_of(self, c: Candidate, rooms: dict[int, int]) -> Candidate:
        """`c` with its expected peak: its function's complete learned peak, else the room
        the gate admitted it with, else unknown."""
        peak, source = 0, "unknown"
        if c.kind == "task":
            fn = c.function_id or ""
            if fn in self.learner.complete and self.learner.peaks.get(fn, 0) > 0:
                peak, source = self.learner.peaks[fn], "learned"
            elif rooms.get(c.pid, 0) > 0:
                peak, source = rooms[c.pid], "reservation"
        if source == "unknown":
            return c
        return replace(c, expected_peak=peak, peak_source=source)

    def _reap(self, now: float) -> None:
        for pid, t in list(self.pending.items()):
            if not self.alive(pid):
                del self.pending[pid]
                self.event_ids.pop(pid, None)
            elif now - t > self.config.pending_timeout_s:
                log.warning("raydbg memory monitor: victim %d did not exit in time", pid)
                del self.pending[pid]

    # -- acting ---------------------------------------------------------------------
    def _act(
        self,
        d: Decision,
        node: NodeMemory,
        growth: float,
        cands: list[Candidate],
        now: float,
    ) -> None:
        cfg = self.config
        dry = cfg.mode == "dry-run"
        round_id = secrets.token_hex(4)
        for x in cands:
            if x.kind == "task" and x.function_id:
                self.learner.note(x.function_id, x.memory)
        self.stats["rounds"] += 1
        top = sorted(self.procs.values(), key=lambda p: p.memory, reverse=True)[:10]
        for v in d.victims:
            c = v.candidate
            # Crossing (or last calm poll) -> this kill, decision time included.
            reaction = self.clock() - (self.crossed_at if self.crossed_at is not None else now)
            # Built before the kill so the kill can name it (e.g. in the worker's log).
            expected = max(c.expected_peak, self.learner.peaks.get(c.function_id or "", 0))
            event = kill_event(
                self.node_id, self.config.mode, self.config.policy.threshold, d, node,
                growth, top, c, v.reason, round_id, reaction, dry, expected,
            )  # fmt: skip
            self.event_ids[c.pid] = event["id"]
            if not dry:
                try:
                    self.kill(c.pid)
                except ProcessLookupError:
                    continue
                except OSError as e:  # killer.KillRefused among them: not the chosen process
                    log.warning("raydbg memory monitor: cannot kill %d: %s", c.pid, e)
                    self.stats["refused"] = self.stats.get("refused", 0) + 1
                    continue
            if dry:
                self._dry_until = now + cfg.dry_run_cooldown_s
            else:
                self.pending[c.pid] = now
            self.stats["kills"] += 0 if dry else 1
            self._metrics.kill(c.kind, dry, reaction, self.node_id)
            try:
                self.record_event(event)
            except Exception:
                log.exception("raydbg memory monitor: could not record the kill event")
            if self.on_kill is not None:
                try:
                    self.on_kill(c, event)
                except Exception:
                    log.exception("raydbg memory monitor: on_kill failed")

    def status(self) -> dict[str, Any]:
        """For the agent's /nodes answer: node memory plus monitor counters."""
        node = self.last
        return {
            "memory": node.to_dict() if node else None,
            "mode": self.config.mode,
            "threshold": self.config.policy.threshold,
            "pending": sorted(self.pending),
            **self.stats,
        }
