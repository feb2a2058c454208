"""The debugger benchmark's part 4, attach: connect -> the first stackTrace of the paused thread.

raydbg: through `raydbg forward` (a real CLI subprocess, started beforehand, relaying through
the gateway with its token); built-in: straight to its debugpy port (no token). Both:
initialize, attach, configurationDone, stopped, then the first stackTrace response (timed);
then continue and detach.
"""

from __future__ import annotations

import asyncio
import os
import sys
import time

from debugger_common import REPO, TARGETS, BenchError, BenchState, end_process


class AttachTiming(BenchState):
    async def _attach_forward(self, sid: str) -> float:
        env = dict(os.environ, RAY_ADDRESS=self.gcs, RAYDBG_TOKEN=self.token)
        proc = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "raydbg", "forward", sid, "--port", "0", "--address", self.gateway_address,
            stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE, env=env, cwd=str(REPO),
        )
        try:
            assert proc.stdout is not None
            line = (await asyncio.wait_for(proc.stdout.readline(), 60)).decode()
            if "127.0.0.1:" not in line:
                err = (await proc.stderr.read()).decode() if proc.stderr else ""
                raise BenchError(f"raydbg forward did not start: {line!r} {err}")
            port = int(line.split("127.0.0.1:")[1].split()[0])
            return await self._attach("127.0.0.1", port)
        finally:
            await end_process(proc)

    async def _attach(self, host: str, port: int) -> float:
        elapsed = await attach_and_time(host, port)
        self._detached = time.monotonic()
        return elapsed


async def attach_and_time(host: str, port: int, timeout: float = 30) -> float:
    """Connect, attach, first stackTrace of the stopped thread (timed); then continue + detach."""
    from raydbg.dap.session import attach_session
    from raydbg.dap.transport import open_tcp

    t = time.perf_counter()
    reader, writer = await open_tcp(host, port, timeout)
    client, stopped = await attach_session(reader, writer, timeout=timeout)
    try:
        thread_id = stopped["body"]["threadId"]
        await client.stack_trace(thread_id, timeout=timeout)
        elapsed = time.perf_counter() - t
        await client.continue_(thread_id, timeout=timeout)
    finally:
        await client.disconnect()
    return elapsed


def attach_checks(med: dict[str, float]) -> dict[str, bool]:
    return {"attach": med.get("attach_ms.raydbg", 1e9) <= TARGETS["attach_ms"]}
