"""Armed breakpoints in one worker: a poll thread, the per-line index, conditions, the hit limit, the pause.

A daemon thread reads one GCS KV key (`breakpoint-version`) every POLL_S; only when it
changes does it load the breakpoints and hand this job's to the layer (sys.monitoring on
3.12+, settrace on 3.11 when opted in). With nothing armed, no event is registered at
all: a task costs what it cost without raydbg.
"""

from __future__ import annotations

import logging
import os
import sys
import threading
import time
from types import CodeType, FrameType
from typing import Protocol

from raydbg.breakpoints import model, store

log = logging.getLogger("raydbg.breakpoints")

POLL_S = 0.5
FULL_RETRY_S = 1.0  # all pause slots held: hits run on without asking GCS again for this long
PY311_ENV = "RAYDBG_BREAK_PY311"
PY311_OFF = ("not armed in a Python 3.11 worker: set RAYDBG_BREAK_PY311=1 in the job's env "
             f"(a settrace fallback: hot code {model.PY311_COST} slower while armed)")


class Layer(Protocol):
    def apply(self, arming: Arming) -> None: ...

    def close(self) -> None: ...  # disarm and give back what the layer holds (sys.monitoring's tool id)


class Armed:
    """One breakpoint as this worker holds it: its compiled condition and local counts."""

    def __init__(self, bp: model.Breakpoint) -> None:
        self.bp = bp
        self.hits = 0
        self.reported = 0  # what the registry has: nothing is written until there is news
        self.reported_error: str | None = None
        self.error: str | None = None
        self.full_until = 0.0
        self.condition: CodeType | None = None
        if bp.condition:
            try:
                self.condition = compile(bp.condition, "<breakpoint condition>", "eval")
            except (SyntaxError, ValueError) as exc:
                self.error = f"condition does not parse: {exc}"

    def true_in(self, frame: FrameType) -> bool:
        if self.bp.condition is None:
            return True
        if self.condition is None:
            return False
        try:
            return bool(eval(self.condition, frame.f_globals, frame.f_locals))
        except Exception as exc:  # the user's expression: an error means no pause, never a crash
            text = f"condition {self.bp.condition!r} raised {type(exc).__name__}: {exc}"[:300]
            if text != self.error:
                log.warning("raydbg: breakpoint %s at %s:%s: %s", self.bp.id, self.bp.file, self.bp.line, text)
            self.error = text
            return False


class Arming:
    """This worker's armed breakpoints, indexed by file and line for the layers."""

    def __init__(self, armed: dict[str, Armed] | None = None) -> None:
        self.armed = armed or {}
        self._files: dict[str, dict[int, list[Armed]] | None] = {}

    def __bool__(self) -> bool:
        return bool(self.armed)

    def lines_for(self, filename: str) -> dict[int, list[Armed]] | None:
        """Armed lines of a code object's file (cached: one lookup per co_filename)."""
        try:
            return self._files[filename]
        except KeyError:
            pass
        names = (filename, os.path.abspath(filename), os.path.realpath(filename))
        lines: dict[int, list[Armed]] = {}
        for a in self.armed.values():
            if model.matches(a.bp.file, names) or (os.path.isabs(a.bp.file) and model.matches(
                    os.path.realpath(a.bp.file), names)):
                lines.setdefault(a.bp.line, []).append(a)
        self._files[filename] = lines or None
        return lines or None

    def lines_in(self, code: CodeType) -> dict[int, list[Armed]] | None:
        """Armed lines that are lines of this code object itself (not of code nested in it)."""
        lines = self.lines_for(code.co_filename)
        if not lines:
            return None
        own = {line for _, _, line in code.co_lines() if line is not None}
        found = {line: a for line, a in lines.items() if line in own}
        return found or None


class Worker:
    """The poll thread's state; one per process (see start())."""

    def __init__(self, job_id: str, who: str, layer: Layer | None) -> None:
        self.job_id = job_id
        self.who = who
        self.layer = layer
        self.arming = Arming()
        self.version: bytes | None = None
        self.slots: set[store.Slot] = set()
        self.lock = threading.Lock()
        self.last_renew = 0.0
        self.off_reason = PY311_OFF  # why nothing is armed here when there is no layer

    # --- the poll thread ---------------------------------------------------------
    def tick(self) -> None:
        version = store.version()
        if version != self.version:
            bps = model.for_worker(store.load(), self.job_id)
            old = self.arming.armed
            armed = {bp.id: old[bp.id] if bp.id in old and old[bp.id].bp.same_spec(bp) else Armed(bp)
                     for bp in bps}
            self.arming = Arming(armed)
            if self.layer is not None:
                try:
                    self.layer.apply(self.arming)
                except Exception as exc:  # e.g. no free sys.monitoring tool id: say so, once
                    self.drop_layer()
                    self.off_reason = f"not armed in this worker: {type(exc).__name__}: {exc}"[:300]
                    log.warning("raydbg: breakpoints %s", self.off_reason)
            elif armed:
                log.warning("raydbg: %d armed breakpoint(s) %s", len(armed), self.off_reason)
            self.version = version
        self.report()
        now = time.monotonic()
        if now - self.last_renew >= 1.0:
            self.last_renew = now
            with self.lock:
                lost = {slot for slot in self.slots if not store.renew_slot(slot)}
                self.slots -= lost
            for slot in lost:  # removed, or taken over after this worker stalled for LEASE_S
                log.warning("raydbg: breakpoint %s: pause slot %d no longer held by this worker "
                            "(breakpoint removed, or not renewed for %.0f s)", slot.bp_id, slot.index, store.LEASE_S)

    def drop_layer(self) -> None:
        layer, self.layer = self.layer, None
        if layer is not None:
            try:
                layer.close()
            except Exception as exc:
                log.debug("raydbg: closing the breakpoint layer failed: %s", exc)

    def report(self) -> None:
        for a in list(self.arming.armed.values()):
            error = a.error if self.layer is not None else self.off_reason
            if a.hits != a.reported or error != a.reported_error:
                store.put_hits(a.bp.id, self.who, a.hits, error)
                a.reported, a.reported_error = a.hits, error

    def run(self) -> None:
        while True:
            time.sleep(POLL_S)
            try:
                self.tick()
            except Exception as exc:  # GCS away for a moment: try again at the next tick
                log.debug("raydbg: breakpoint poll failed: %s", exc)

    # --- a thread reached an armed line (called by the layer) ------------------
    def hit(self, armed: list[Armed], frame: FrameType) -> None:
        try:
            self._hit(armed, frame)
        except Exception:  # raised here, it would surface in the user's line
            log.exception("raydbg: armed breakpoint handling failed; the task goes on")

    def _hit(self, armed: list[Armed], frame: FrameType) -> None:
        for a in armed:
            if not a.true_in(frame):
                continue
            a.hits += 1
            if a.bp.hit_limit == 0 or time.monotonic() < a.full_until:
                continue
            try:
                slot = store.claim_slot(a.bp.id, a.bp.hit_limit, self.who)
            except Exception as exc:
                log.warning("raydbg: breakpoint %s: no pause (registry: %s)", a.bp.id, exc)
                continue
            if slot is None:
                a.full_until = time.monotonic() + FULL_RETRY_S
                continue
            self._pause(a, slot, frame)
            return  # one pause per execution of the line

    def _pause(self, a: Armed, slot: store.Slot, frame: FrameType) -> None:
        from raydbg.worker.session import pause

        with self.lock:
            self.slots.add(slot)
        try:
            pause(frame, "breakpoint", breakpoint_id=a.bp.id)
        except Exception:
            log.exception("raydbg: breakpoint %s could not start a debug session; continuing", a.bp.id)
        finally:
            with self.lock:
                self.slots.discard(slot)
                try:
                    store.release_slot(slot)
                except Exception:
                    log.debug("raydbg: slot %s not released (its lease runs out)", slot.key)


_worker: Worker | None = None


def _layer() -> Layer | None:
    if sys.version_info >= (3, 12):
        from raydbg.breakpoints.monitoring import MonitoringLayer

        return MonitoringLayer(lambda armed, frame: current_hit(armed, frame))
    if os.environ.get(PY311_ENV) == "1":
        from raydbg.breakpoints.settrace import SettraceLayer

        return SettraceLayer(lambda armed, frame: current_hit(armed, frame))
    return None


def current_hit(armed: list[Armed], frame: FrameType) -> None:
    if _worker is not None:
        _worker.hit(armed, frame)


def start(job_id: str, node_id: str) -> Worker | None:
    """In a raydbg-activated worker: arm what is armed now (before the first task), then poll."""
    global _worker
    if _worker is not None or os.environ.get("RAYDBG_BREAKPOINTS", "1") == "0":
        return _worker
    worker = Worker(job_id, f"{node_id[:12]}-{os.getpid()}", _layer())
    _worker = worker
    try:
        worker.tick()  # a worker started after arming pauses from its very first task
    except Exception as exc:
        log.debug("raydbg: first breakpoint read failed: %s", exc)
    t = threading.Thread(target=worker.run, name="raydbg-breakpoints", daemon=True)
    t.pydev_do_not_trace = True  # type: ignore[attr-defined]
    t.is_pydev_daemon_thread = True  # type: ignore[attr-defined]
    t.start()
    return worker


def loaded_version() -> bytes | None:
    """The `breakpoint-version` this worker's arming was last built from (None: no poll
    thread here): what "armed in this worker" means, for whoever must wait for it."""
    return _worker.version if _worker is not None else None


def worker_setup() -> None:
    """Called by raydbg's worker_process_setup_hook."""
    import ray

    ctx = ray.get_runtime_context()
    start(ctx.get_job_id(), ctx.get_node_id())
