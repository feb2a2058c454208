"""The monitor as its own process, spawned by the node agent, out of the OOM killer's reach.

Why a separate process: Ray gives every worker (the agent actor included)
`oom_score_adj=1000`, so a monitor inside the agent would be the kernel's first
victim, the very thing it exists to prevent. This process sets its own score to
-1000 (with CAP_SYS_RESOURCE) or the lowest it is allowed, runs at nice -10 and locks
its pages in RAM when it can, talks to GCS directly (no ray.init), runs in its own
session (a killed agent does not take it along), holds a per-node lock (one monitor per
node however often the agent restarts), and exits when the watched process (the raylet)
is gone.

    python -m raydbg.memory.service --gcs-address HOST:PORT --node-id HEX

`spawn(...)` is what the agent calls.
"""

from __future__ import annotations

import argparse
import contextlib
import ctypes
import json
import logging
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import msgspec

from raydbg import private_dir, schema, validate
from raydbg.memory import node_files
from raydbg.memory.killer import Killable, Killer, find_raylet
from raydbg.memory.monitor import MemoryMonitor, MonitorConfig
from raydbg.memory.node_memory import NodeMeasurer
from raydbg.memory.policy import Candidate
from raydbg.proc_identity import pid_alive

log = logging.getLogger("raydbg.memory")
MONITOR_NICENESS = -10  # earlyoom's -p uses -20; -10 still leaves the kernel's own threads ahead
STATUS_KEY = "memory/"  # memory/<node_id> -> monitor status JSON, refreshed every second


def lower_oom_score(proc: Path = Path("/proc/self")) -> int:
    """Set oom_score_adj as low as allowed (-1000 as root); returns the value in effect."""
    path = proc / "oom_score_adj"
    for value in (-1000, -999, -500, 0):
        try:
            path.write_text(str(value))
            return value
        except OSError:
            continue
    try:
        return int(path.read_text())
    except (OSError, ValueError):
        return 0


def raise_cpu_priority(niceness: int = MONITOR_NICENESS) -> int:
    """Run ahead of the node's busy workers (root or CAP_SYS_NICE): on a saturated CPU a poll
    that waits its turn lets memory reach the kernel's limit first. Returns the niceness in
    effect. Linux keeps it per thread: call before starting any, they inherit it."""
    with contextlib.suppress(OSError):
        os.setpriority(os.PRIO_PROCESS, 0, niceness)
    return os.getpriority(os.PRIO_PROCESS, 0)


def lock_memory() -> bool:
    """mlockall(MCL_CURRENT): the monitor's pages cannot be evicted under pressure."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        return bool(libc.mlockall(1) == 0)  # MCL_CURRENT
    except Exception:
        return False


def worker_log_line(pid: int, line: str) -> bool:
    """Append one line to the worker's stderr log (Ray shows it in the driver, prefixed)."""
    try:
        target = os.readlink(f"/proc/{pid}/fd/2")
        if not target.startswith("/") or not target.endswith((".err", ".log", ".out")):
            return False
        # Through the worker's own descriptor, not the path: Ray's log dir is open to all,
        # and a name there may have been swapped for a link to something else.
        fd = os.open(f"/proc/{pid}/fd/2", os.O_WRONLY | os.O_APPEND | os.O_CLOEXEC)
        with os.fdopen(fd, "a") as f:
            f.write(line.rstrip("\n") + "\n")
        return True
    except OSError:
        return False


class Recorder:
    """record_event/on_kill for the monitor: registry events + the burn-out marker."""

    def __init__(self, registry: Any, budget: Any) -> None:
        self.registry = registry
        self.budget = budget

    def record_event(self, event: dict[str, Any]) -> None:
        # Same record (checked against the one Event struct) and key as registry.put_event,
        # with the id the monitor chose.
        checked = msgspec.convert(event, schema.Event)
        validate.event_details(checked.kind, checked.details)  # a MemoryKillDetails (schema.EVENT_DETAILS)
        key = f"{self.registry.EVENT}{int(checked.ts * 1000):015d}-{checked.id}"
        self.registry.put(key, msgspec.to_builtins(checked))

    def on_kill(self, victim: Candidate, event: dict[str, Any]) -> None:
        if event["kind"] != "memory.kill":
            return
        ident = victim.task_id or victim.actor_id
        if ident:
            expected = event.get("details", {}).get("victim", {}).get("expected_peak")
            room = int(expected or victim.memory)
            self.budget.mark_killed(ident, victim.prior_kills + 1, event.get("id", ""), room)


def build(
    gcs_address: str,
    node_id: str,
    cgroup_dir: str | None = None,
    protect: tuple[int, ...] = (),
    config: MonitorConfig | None = None,
    raylet_pid: int = 0,
) -> MemoryMonitor:
    """A monitor wired to GCS (no ray.init): registry events, budgets, task events, actors.

    raylet_pid: kill only that raylet's children (0: no parent check, a hand-run monitor).
    """
    from raydbg import _ray_internals, registry
    from raydbg.memory import budgets
    from raydbg.memory.gpu import GpuReader
    from raydbg.memory.worker_tasks import GcsView, Resolver

    gcs = _ray_internals.gcs_client(gcs_address)
    budgets.use_client(gcs)  # the registry's client too
    state = _ray_internals.gcs_state(gcs_address)
    who = Resolver(
        GcsView(state),
        node_id,
        protect={os.getpid(), os.getppid(), *protect},
        gpu=GpuReader(),
    )
    rec = Recorder(registry, budgets)
    killer = Killer.for_raylet(raylet_pid) if raylet_pid else Killer(None)

    def kill(pid: int) -> None:
        ev = mon.event_ids.get(pid, "?")
        snap = mon.procs.get(pid)  # the process the decision was made on
        # Checked at the moment of the kill: a pid reused since the snapshot is refused.
        killer.kill(
            pid,
            snap.start_ticks if snap is not None else None,
            before=lambda: worker_log_line(
                pid, f"raydbg: killed by raydbg's memory monitor (event {ev}): `raydbg events`"
            ),
        )

    measurer = NodeMeasurer(cgroup_dir=Path(cgroup_dir) if cgroup_dir else None)
    mon = MemoryMonitor(
        Killable(who, killer),
        kill=kill,
        record_event=rec.record_event,
        measurer=measurer,
        config=config or MonitorConfig.current(),
        node_id=node_id,
        on_kill=rec.on_kill,
    )
    return mon


def lock_dir() -> Path:
    """`/tmp/raydbg-<uid>/memory`, 0700 and ours (UnsafeDirError otherwise)."""
    return private_dir.private_dir("/tmp", "memory")


def take_lock(node_id: str, directory: str | None = None) -> Any:
    """An exclusive flock per node, held for the process's life; None if another holds it.

    Raises private_dir.UnsafeDirError when the directory is not private to us.
    """
    import fcntl

    d = private_dir.check_private(Path(directory)) if directory else lock_dir()
    fd = private_dir.open_private(d / f"memory-{node_id or 'local'}.lock", os.O_RDWR | os.O_CREAT)
    f = os.fdopen(fd, "r+")
    try:
        fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        f.close()
        return None
    f.truncate(0)
    f.write(str(os.getpid()))
    f.flush()
    return f


def report_failure(node_id: str, reason: str) -> None:
    """Memory protection is never off in silence: a status record and an event say why."""
    from raydbg import registry

    log.error("raydbg memory monitor cannot start: %s", reason)
    try:
        registry.put(
            STATUS_KEY + node_id,
            {"state": "failed", "error": reason, "pid": os.getpid(), "ts": time.time()},
        )
        registry.record_event(
            "monitor.failed", f"memory monitor not running: {reason}", node_id=node_id,
            details=schema.MonitorFailedDetails(reason=reason),
        )  # fmt: skip
    except Exception as e:
        log.error("raydbg memory monitor: could not report the failure either: %s", e)


def _status_loop(mon: MemoryMonitor, node_id: str, stop: threading.Event) -> None:
    from raydbg import registry

    while not stop.wait(1.0):
        try:
            registry.put(
                STATUS_KEY + node_id,
                {**mon.status(), "state": "running", "pid": os.getpid(), "ts": time.time()},
            )
        except Exception as e:
            log.debug("raydbg memory: status not published: %s", e)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m raydbg.memory.service")
    p.add_argument("--gcs-address", required=True)
    p.add_argument("--node-id", default="")
    p.add_argument("--cgroup-dir", default=None, help="measure this cgroup instead of our own")
    p.add_argument("--protect", type=int, action="append", default=[])
    p.add_argument("--watch-pid", type=int, default=0, help="exit when it is gone (the raylet)")
    p.add_argument(
        "--no-raylet-check", dest="raylet_check", action="store_false",
        help="kill processes that are not children of the node's raylet (hand-run monitors)",
    )  # fmt: skip
    p.add_argument("--lock-dir", default=None, help="default: /tmp/raydbg-<uid>/memory")
    args = p.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s raydbg-memory %(message)s")
    try:
        lock = take_lock(args.node_id, args.lock_dir)
        # The gate's records and flags live here: refuse an unsafe one now, not later.
        node_files.ensure_run_dir()
        raylet = 0
        if args.raylet_check:
            # Kills reach only this node's raylet's children: find that raylet for sure.
            raylet = find_raylet(args.node_id, args.watch_pid) or 0
            if not raylet:
                raise OSError(f"no raylet of node {args.node_id or '?'} on this machine: "
                              "the monitor kills only a raylet's workers, so it does not start")
            Killer.for_raylet(raylet)
    except (private_dir.UnsafeDirError, OSError) as e:
        from raydbg import registry

        registry.use_client(registry.client_for(args.gcs_address))
        report_failure(args.node_id, str(e))
        print(str(e), file=sys.stderr, flush=True)
        return 2
    if lock is None:
        log.info("a memory monitor already runs for node %s; exiting", args.node_id)
        return 0
    niceness = raise_cpu_priority()
    try:
        from raydbg import telemetry

        telemetry.setup("memory-monitor")
    except Exception as e:
        log.debug("telemetry off: %s", e)
    score = lower_oom_score()
    locked = lock_memory() if os.geteuid() == 0 else False
    try:
        mon = build(
            args.gcs_address, args.node_id, args.cgroup_dir, tuple(args.protect), raylet_pid=raylet
        )
    except Exception as e:  # e.g. the raylet went between the check and now
        from raydbg import registry

        with contextlib.suppress(Exception):
            registry.use_client(registry.client_for(args.gcs_address))
        report_failure(args.node_id, f"raydbg memory monitor: {type(e).__name__}: {e}")
        print(f"raydbg memory monitor: {e}", file=sys.stderr, flush=True)
        return 2
    log.info(
        "memory monitor pid %d: mode %s, threshold %.2f, oom_score_adj %d, nice %d, mlock %s, cgroup %s",
        os.getpid(), mon.config.mode, mon.config.policy.threshold, score, niceness, locked,
        mon.measurer.cgroup_dir,
    )  # fmt: skip
    stop = threading.Event()
    watched = args.watch_pid or os.getppid()

    def watch() -> None:
        while not stop.wait(0.5):
            if not pid_alive(watched):
                log.info("watched process %d gone; exiting", watched)
                mon.stop()
                stop.set()

    def on_term(*_: Any) -> None:
        mon.stop()
        stop.set()

    signal.signal(signal.SIGTERM, on_term)
    threading.Thread(target=watch, daemon=True).start()
    threading.Thread(target=_status_loop, args=(mon, args.node_id, stop), daemon=True).start()
    mon.run()
    stop.set()
    print(json.dumps(mon.stats), flush=True)
    return 0


def spawn(
    gcs_address: str,
    node_id: str,
    cgroup_dir: str | None = None,
    protect: tuple[int, ...] = (),
    env: dict[str, str] | None = None,
    log_path: str | None = None,
    watch_pid: int | None = None,
) -> subprocess.Popen[bytes]:
    """Start the monitor process; a second one for the same node exits at once.

    watch_pid: the monitor exits when this process ends (default: the caller). The agent
    passes its parent, the raylet, so the monitor outlives an agent killed under pressure.
    """
    cmd = [sys.executable, "-m", "raydbg.memory.service", "--gcs-address", gcs_address]
    cmd += ["--node-id", node_id, "--watch-pid", str(watch_pid or os.getpid())]
    if cgroup_dir:
        cmd += ["--cgroup-dir", cgroup_dir]
    for pid in protect:
        cmd += ["--protect", str(pid)]
    out: Any = subprocess.DEVNULL
    if log_path:  # in Ray's logs dir, open to all: never follow a link planted there
        out = os.fdopen(
            private_dir.open_private(log_path, os.O_WRONLY | os.O_CREAT | os.O_APPEND), "ab"
        )
    return subprocess.Popen(
        cmd,
        env={**os.environ, **(env or {})},
        stdout=out,
        stderr=subprocess.STDOUT,
        start_new_session=True,  # not killed with the agent's process group
    )


if __name__ == "__main__":
    sys.exit(main())
