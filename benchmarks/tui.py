"""TUI cost: refresh-cycle CPU with a big fake cluster, key latency, and Enter-to-source on Ray.

    python benchmarks/tui.py [--cycles 30] [--cluster] [--attaches 7] [--json]

1. refresh cycle (no Ray): a fake gateway holds 500 paused sessions, 64 nodes and
   1,000 events. Each cycle one session pauses (new top row), one resumes, 16 nodes'
   memory changes and one event arrives, with the "gateway answers" message every
   poll sends; the cycle's CPU time (process_time) covers the pane updates and the
   repaint that follows (headless: without writing escape codes, ~1 ms more).
   Target: median < 50 ms.
2. key latency (no Ray): between cycles, Down delivered as the terminal driver does,
   until the screen has painted the moved cursor (key_to_paint). Target: well under
   100 ms. pilot_press is the same key through Pilot.press, which waits for the app
   to idle (two sleeps of >= 20 ms): the figure reported before 2026-12-01.
3. --cluster: a real local Ray cluster (2 CPUs, raydbg active, `raydbg up`); a task
   pauses at breakpoint(); Enter on its row -> source and stack shown (the debug
   screen's first paint, variables may follow). Target: median < 500 ms.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from textual import events as textual_events

from raydbg.dap.framing import ByteReader, ByteWriter
from raydbg.tui.app import RaydbgApp, create_app
from raydbg.tui.debug_screen import DebugScreen
from raydbg.tui.main_screen import MainScreen
from raydbg.tui.messages import EventsUpdated, GatewayState, NodesUpdated, SessionsUpdated
from raydbg.tui.row_table import RowTable

REPO = Path(__file__).resolve().parents[1]


def fake_session(i: int, since: float) -> dict[str, Any]:
    return {
        "id": f"{i:012x}",
        "job_id": "01000000",
        "task_id": f"{i:048x}",
        "task_name": f"train_step_{i % 17}",
        "actor_id": None,
        "actor_name": None,
        "train_rank": i % 8,
        "node_id": f"{i % 64:056x}",
        "node_ip": f"10.0.{i % 64}.1",
        "pid": 1000 + i,
        "thread_id": 1,
        "thread_name": "MainThread",
        "file": f"/app/pkg/module_{i % 23}.py",
        "line": 10 + i % 300,
        "function": "step",
        "reason": "breakpoint",
        "exception": None,
        "since": since,
        "state": "waiting",
        "attachable": True,
        "cwd": "/app",
    }


def fake_node(i: int, used: float) -> dict[str, Any]:
    gib = 1024**3
    return {
        "node_id": f"{i:056x}",
        "node_ip": f"10.0.{i}.1",
        "is_head": i == 0,
        "alive": True,
        "memory": {"used": used * gib, "limit": 256 * gib},
        "gpus": [{"index": g, "used": (g + i) % 80 * gib, "total": 80 * gib} for g in range(8)],
        "workers": 12,
        "agent": {"port": 1},
    }


def fake_event(i: int, ts: float) -> dict[str, Any]:
    return {
        "id": f"e{i}",
        "ts": ts,
        "kind": "memory.kill",
        "node_id": f"{i % 64:056x}",
        "message": f"killed pid {i} (retriable task grow) at 96% of 256G",
        "details": {},
    }


class StaticGateway:
    """Answers once with fixed data; the benchmark then posts updates itself."""

    address = "fake:0"

    def __init__(self, sessions: list[Any], nodes: list[Any], events: list[Any]) -> None:
        self.data = (sessions, nodes, events)

    async def sessions(self) -> list[dict[str, Any]]:
        return list(self.data[0])

    async def session(self, sid: str) -> dict[str, Any]:
        raise KeyError(sid)

    async def nodes(self) -> list[dict[str, Any]]:
        return list(self.data[1])

    async def events(self, limit: int = 100) -> list[dict[str, Any]]:
        return list(self.data[2])[:limit]

    async def connect_dap(self, sid: str) -> tuple[ByteReader, ByteWriter]:
        raise ConnectionError("no DAP in this benchmark")


async def refresh_benchmark(cycles: int) -> dict[str, Any]:
    now = time.time()
    sessions = [fake_session(i, now - i) for i in range(500)]
    nodes = [fake_node(i, 100 + i) for i in range(64)]
    events = [fake_event(i, now - i) for i in range(1000)]
    app = create_app(StaticGateway(sessions, nodes, events), refresh=3600)
    cpu_ms: list[float] = []
    key_ms: list[float] = []
    pilot_ms: list[float] = []
    async with app.run_test(size=(160, 50)) as pilot:
        screen = app.screen
        assert isinstance(screen, MainScreen)
        table = screen.query_one("#sessions-table", RowTable)
        paints = PaintClock(screen, table)
        while table.row_count < 500:
            await pilot.pause(0.05)
        await pilot.pause(0.2)
        for cycle in range(cycles):
            sessions = [fake_session(10_000 + cycle, time.time()), *sessions[:-1]]
            for j in range(16):
                k = (cycle * 16 + j) % 64
                nodes[k] = fake_node(k, 100 + (cycle + j) % 150)
            events = [fake_event(5000 + cycle, time.time()), *events[:-1]]
            start = time.process_time()
            screen.post_message(SessionsUpdated(list(sessions)))
            screen.post_message(NodesUpdated(list(nodes)))
            screen.post_message(EventsUpdated(list(events)))
            screen.post_message(GatewayState(True, ""))
            await pilot.pause()  # messages handled and the screen repainted
            cpu_ms.append((time.process_time() - start) * 1000)
            key_ms.append(await paints.key_to_paint(app) * 1000)
            row = table.cursor_row
            started = time.perf_counter()
            await pilot.press("up")
            while table.cursor_row == row:
                await asyncio.sleep(0.001)
            pilot_ms.append((time.perf_counter() - started) * 1000)
    return {
        "sessions": 500,
        "nodes": 64,
        "events": 1000,
        "cycles": cycles,
        "refresh_cpu_ms_median": round(statistics.median(cpu_ms), 2),
        "refresh_cpu_ms_max": round(max(cpu_ms), 2),
        "key_to_paint_ms_median": round(statistics.median(key_ms), 2),
        "key_to_paint_ms_max": round(max(key_ms), 2),
        "pilot_press_ms_median": round(statistics.median(pilot_ms), 2),
    }


class PaintClock:
    """Times the first paint that shows the cursor on another row (wraps a private hook)."""

    def __init__(self, screen: MainScreen, table: RowTable) -> None:
        self.table = table
        self.row = -1  # the cursor row before the key
        self.shown: float | None = None
        refresh = screen._compositor_refresh

        def timed() -> None:
            refresh()
            if self.shown is None and self.row >= 0 and table.cursor_row != self.row:
                self.shown = time.perf_counter()

        screen._compositor_refresh = timed  # type: ignore[method-assign]

    async def key_to_paint(self, app: RaydbgApp) -> float:
        """Seconds from Down reaching the app to the paint of the moved cursor."""
        self.row, self.shown = self.table.cursor_row, None
        started = time.perf_counter()
        app.post_message(textual_events.Key("down", None))  # what the terminal driver sends
        while self.shown is None:
            await asyncio.sleep(0.0005)
        self.row = -1
        return self.shown - started


def paused_task(n: int) -> int:
    value = n * 2
    breakpoint()
    return value


async def attach_benchmark(attaches: int) -> dict[str, Any]:
    import ray
    from ray import cloudpickle

    import raydbg
    from raydbg.client import Gateway
    from raydbg.tui.gateway import HttpGateway

    # Workers cannot import this file as a module: ship paused_task by value.
    cloudpickle.register_pickle_by_value(sys.modules[__name__])
    os.environ.update({"RAY_DEBUG": "1", "RAYDBG_WAIT_TIMEOUT": "120"})
    ray.init(
        num_cpus=2,
        include_dashboard=False,
        runtime_env=raydbg.runtime_env(),
        logging_level=logging.ERROR,
    )
    try:
        address = str(ray.get_runtime_context().gcs_address)
        env = {**os.environ, "RAY_ADDRESS": address}
        up = subprocess.run(
            [sys.executable, "-m", "raydbg", "up"],
            env=env,
            cwd=REPO,
            capture_output=True,
            text=True,
            timeout=120,
        )
        if up.returncode != 0:
            raise SystemExit(f"raydbg up failed: {up.stderr.strip()}")
        os.environ["RAY_ADDRESS"] = address
        found = Gateway.discover()
        app = create_app(HttpGateway(found.address, found.token), refresh=0.05)
        seconds: list[float] = []
        mounted: list[float] = []  # debug screen mounted -> source shown (no UI overhead)
        async with app.run_test(size=(120, 40)) as pilot:
            for i in range(attaches):
                ref = ray.remote(paused_task).remote(i)
                await wait_row(app, pilot)
                started = time.perf_counter()
                await pilot.press("enter")
                while not (isinstance(app.screen, DebugScreen) and app.screen.attach_seconds):
                    await asyncio.sleep(0.005)
                # Pilot's press returns late (it waits for idle): use the screen's own clock.
                assert app.screen.shown_at is not None
                seconds.append(app.screen.shown_at - started)
                mounted.append(app.screen.attach_seconds)
                while app.screen.state != "paused":
                    await asyncio.sleep(0.01)
                await pilot.press("c")
                while not isinstance(app.screen, MainScreen):
                    await asyncio.sleep(0.01)
                assert await asyncio.to_thread(ray.get, ref, timeout=60) == i * 2
        return {
            "attaches": attaches,
            "enter_to_source_ms_median": round(statistics.median(seconds) * 1000, 1),
            "enter_to_source_ms_all": [round(s * 1000, 1) for s in seconds],
            "mount_to_source_ms_median": round(statistics.median(mounted) * 1000, 1),
        }
    finally:
        ray.shutdown()


async def wait_row(app: RaydbgApp, pilot: Any, timeout: float = 90) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if isinstance(app.screen, MainScreen):
            table = app.screen.query_one("#sessions-table", RowTable)
            if table.row_count and table.get_row_at(0)[3] == "waiting":
                table.move_cursor(row=0)
                return
        await asyncio.sleep(0.01)
    raise SystemExit("no attachable session appeared in time")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cycles", type=int, default=30)
    parser.add_argument("--cluster", action="store_true", help="also measure Enter on Ray")
    parser.add_argument("--attaches", type=int, default=7)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    result = {"refresh": asyncio.run(refresh_benchmark(args.cycles))}
    if args.cluster:
        result["attach"] = asyncio.run(attach_benchmark(args.attaches))
    if args.json:
        print(json.dumps(result, indent=2))
        return
    for section, figures in result.items():
        print(f"[{section}]")
        for key, value in figures.items():
            print(f"  {key}: {value}")


if __name__ == "__main__":
    main()
