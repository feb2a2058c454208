"""The debugger benchmark's parts 2 and 3, debug sessions: pause latency, and CPU speed after a session.

Per round and debugger, one actor pauses twice (cold: the first pause in its worker, warm:
the second), each pause timed from `breakpoint()` to the first answer that lists it (raydbg:
the gateway's session list; built-in: the state API's workers with a paused thread) and
attached to (debugger_attach); then how long the worker keeps a tracer after the detach,
and two CPU loops in it against a never-debugged actor of the same job.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

from debugger_attach import AttachTiming
from debugger_common import LOOPS, POLL_S, TARGETS, BenchError, Driver, ratio


class SessionRounds(AttachTiming):
    async def debug_round(self, kind: str) -> None:
        """One pausing actor (cold pause, warm pause, each attached to) and one never-debugged."""
        drv = self.drivers[kind]
        dbg = "raydbg" if kind == "raydbg" else "builtin"
        label = "raydbg" if kind == "raydbg" else "built-in"
        try:
            self.step(f"{label}: starting two actors")
            pid = await drv.call("actor", name="paused")
            await drv.call("actor", name="fresh")
            for phase in ("cold", "warm"):
                self.step(f"{label}: {phase} pause")
                await drv.call("pause", name="paused")
                if kind == "raydbg":
                    await self._raydbg_pause(pid, phase)
                else:
                    await self._builtin_pause(pid, phase)
                t0 = await drv.call("join", name="paused", timeout=60)
                for key, seen in self._seen.items():
                    self.add(f"{key}.{phase}", (seen - t0) * 1000)
            self.step(f"{label}: tracer after the session")
            await self._tracer_gone(drv, dbg)
            self.step(f"{label}: CPU loops")
            for loop, params in LOOPS.items():
                for name in ("paused", "fresh"):  # one unmeasured run each
                    await drv.call("spin", name=name, loop=loop, **params)
                for i in range(self.args.spins):
                    for name in (("paused", "fresh") if i % 2 == 0 else ("fresh", "paused")):
                        took = await drv.call("spin", name=name, loop=loop, **params)
                        self.add(f"spin.{loop}.{dbg}.{name}", took["cpu"])
                        self.add(f"spin_wall.{loop}.{dbg}.{name}", took["wall"])
        finally:
            for name in ("paused", "fresh"):
                try:
                    await drv.call("kill", name=name, timeout=30)
                except BenchError as exc:
                    self.notes.append(str(exc))

    async def _tracer_gone(self, drv: Driver, kind: str, limit: float = 2.0) -> None:
        """How long after the client's detach the worker runs without a tracer (sys.gettrace())."""
        while True:
            tracer = await drv.call("tracer", name="paused")
            waited = time.monotonic() - self._detached
            if tracer == "None" or waited > limit:
                break
            await asyncio.sleep(0.01)
        self.add(f"tracer_left.{kind}", float(tracer != "None"))
        if tracer == "None":
            self.add(f"tracer_gone_ms.{kind}", waited * 1000)
        elif kind == "raydbg":  # raydbg removes it once no client is attached: say why not
            state = await drv.call("debugger_state", name="paused")
            self.notes.append(f"raydbg's tracer still set {waited:.1f}s after the detach: {tracer}; "
                              f"worker {state}")

    async def _raydbg_pause(self, pid: int, phase: str) -> None:
        from raydbg.client import GatewayError

        listed = attachable = None
        sid = ""
        deadline = time.monotonic() + 60
        while attachable is None:
            if time.monotonic() > deadline:
                raise BenchError(f"raydbg: worker {pid}'s pause not listed attachable within 60s")
            asked = time.time()
            try:
                recs = await self.gateway.sessions()
            except GatewayError as exc:
                self.notes.append(f"gateway poll failed once: {exc}")
                recs = []
            now = time.time()
            self.add("poll_ms.raydbg", (now - asked) * 1000)
            for rec in recs:
                if rec.get("pid") == pid:
                    sid = rec["id"]
                    listed = listed or now
                    if rec.get("attachable"):
                        attachable = now
            if attachable is None:
                await asyncio.sleep(POLL_S)
        assert listed is not None
        self._seen = {"pause.raydbg.listed": listed, "pause.raydbg.attachable": attachable}
        self.step(f"raydbg: {phase} attach through `raydbg forward`")
        self.add(f"attach_ms.raydbg.{phase}", await self._attach_forward(sid) * 1000)

    async def _builtin_pause(self, pid: int, phase: str) -> None:
        from ray.util.state import list_workers

        def paused() -> Any:
            found = list_workers(address=self.dashboard, detail=True, filters=[("pid", "=", pid)],
                                 raise_on_missing_output=False)
            for w in found:
                if w.num_paused_threads and w.debugger_port:
                    return w
            return None

        deadline = time.monotonic() + 60
        while True:
            if time.monotonic() > deadline:
                raise BenchError(f"built-in: worker {pid} not shown paused within 60s")
            asked = time.time()
            w = await asyncio.to_thread(paused)
            self.add("poll_ms.builtin", (time.time() - asked) * 1000)
            if w is not None:
                seen = time.time()
                break
            await asyncio.sleep(POLL_S)
        self._seen = {"pause.builtin": seen}
        self._note_adapters(pid)
        self.step(f"built-in: {phase} attach (direct, no token)")
        self.add(f"attach_ms.builtin.{phase}", await self._attach(w.ip, int(w.debugger_port)) * 1000)

    def _note_adapters(self, pid: int) -> None:
        """The built-in's debugpy adapter processes (children of our workers), to end at exit."""
        try:
            import psutil

            self.adapter_pids.update(p.pid for p in psutil.Process(pid).children(recursive=True))
        except Exception:
            pass


def cpu_ratios(med: dict[str, float]) -> dict[str, float]:
    ratios: dict[str, float] = {}
    for loop in LOOPS:
        # speed in the worker that was debugged relative to a never-debugged one (1 = same)
        ratios[f"cpu.{loop}.raydbg"] = ratio(med, f"spin.{loop}.raydbg.fresh", f"spin.{loop}.raydbg.paused")
        ratios[f"cpu.{loop}.builtin"] = ratio(med, f"spin.{loop}.builtin.fresh", f"spin.{loop}.builtin.paused")
        for dbg in ("raydbg", "builtin"):
            ratios[f"cpu_wall.{loop}.{dbg}"] = ratio(med, f"spin_wall.{loop}.{dbg}.fresh",
                                                     f"spin_wall.{loop}.{dbg}.paused")
        # never-debugged workers: raydbg's job vs plain Ray (different rounds: noisier)
        ratios[f"cpu.{loop}.idle"] = ratio(med, f"spin.{loop}.builtin.fresh", f"spin.{loop}.raydbg.fresh")
    return ratios


def session_checks(ratios: dict[str, Any], med: dict[str, float]) -> dict[str, bool]:
    return {
        "cpu.calls": ratios["cpu.calls.raydbg"] >= TARGETS["cpu_ratio"],
        "cpu.loop": ratios["cpu.loop.raydbg"] >= TARGETS["cpu_ratio"],
        "pause.cold": med.get("pause.raydbg.listed.cold", 1e9) <= TARGETS["pause_ms"],
        "pause.warm": med.get("pause.raydbg.listed.warm", 1e9) <= TARGETS["pause_ms"],
    }
