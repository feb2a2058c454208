"""DebugController: one attached session's DAP conversation, as the debug view needs it.

No Textual here: the screen calls these coroutines from workers and gets DAP
events through ``on_event`` / ``on_close`` callbacks.
"""

from __future__ import annotations

import ast
import asyncio
import os
import re
from collections.abc import Callable
from typing import Any

from raydbg.dap import DapClient, DapError, attach_session
from raydbg.dap.types import EvaluateResult, Scope, StackFrame, Variable
from raydbg.tui.gateway import TuiGateway

TENSOR_TYPES = {"Tensor", "Parameter", "ndarray", "DTensor"}
MAX_SOURCE_CHARS = 4_000_000
_SAFE_NAME = re.compile(r"^[\w.\[\]'\"()]+$")


class DebugController:
    """Attach, follow the stopped thread, read frames/source/variables, step, detach."""

    def __init__(
        self, gateway: TuiGateway, session_id: str, timeout: float = 15.0, local: bool = False
    ) -> None:
        self.gateway = gateway
        self.local = local  # the debuggee runs on this machine: read its files directly
        self.session_id = session_id
        self.timeout = timeout
        self.client: DapClient | None = None
        self.thread_id: int | None = None
        self.frames: list[StackFrame] = []
        self.frame_index = 0
        self.running = False
        self._sources: dict[str, list[str]] = {}

    # -- connection ------------------------------------------------------------

    async def attach(
        self,
        on_event: Callable[[dict[str, Any]], object],
        on_close: Callable[[str], object],
    ) -> dict[str, Any]:
        """Connect through the gateway relay; return the first ``stopped`` event."""
        reader, writer = await self.gateway.connect_dap(self.session_id)
        client, stopped = await attach_session(reader, writer, timeout=self.timeout)
        self.client = client
        self.thread_id = int(stopped.get("body", {}).get("threadId", 0)) or None
        client.subscribe(None, on_event)
        client.channel.on_close(lambda reason: on_close(str(reason)))
        return stopped

    @property
    def dap(self) -> DapClient:
        if self.client is None:
            raise RuntimeError("not attached")
        return self.client

    @property
    def attached(self) -> bool:
        return self.client is not None and self.client.is_open

    async def detach(self, timeout: float = 2.0, resume: bool = False) -> None:
        """Disconnect; closes the stream in every case.

        Leaving releases only the threads this client resumed (docs/security.md): with
        `resume` the followed thread is continued first, else it stays paused, listed and
        attachable by the next client.
        """
        if self.client is not None:
            if self.client.is_open:
                if resume and self.thread_id is not None and not self.running:
                    await self.dap.continue_(self.thread_id)
                await self.client.disconnect(timeout=timeout)
            else:
                await self.client.close()

    # -- where are we ------------------------------------------------------------

    def stopped(self, event: dict[str, Any]) -> None:
        """Follow the thread a ``stopped`` event names, unless it asks to keep the focus
        (the relay's stops of the worker's other paused threads)."""
        body = event.get("body", {})
        thread = body.get("threadId")
        if thread and body.get("preserveFocusHint") and self.thread_id not in (None, int(thread)):
            return
        if thread:
            self.thread_id = int(thread)
        self.running = False

    async def load_stack(self) -> list[StackFrame]:
        if self.thread_id is None:
            threads = await self.dap.threads()
            self.thread_id = threads[0]["id"] if threads else None
        if self.thread_id is None:
            self.frames = []
        else:
            self.frames = await self.dap.stack_trace(self.thread_id, levels=200)
        self.frame_index = 0
        return self.frames

    @property
    def frame(self) -> StackFrame | None:
        return self.frames[self.frame_index] if self.frames else None

    async def source_lines(self, frame: StackFrame) -> list[str]:
        """Lines of the frame's file as the debuggee sees them (it may be on another node)."""
        path = frame.get("source", {}).get("path", "")
        if path in self._sources:
            return self._sources[path]
        lines: list[str] = []
        if path and self.local and os.path.isfile(path):
            lines = _read_lines(path)  # saves a relayed round trip on the head node
        elif path:
            expr = f"''.join(__import__('linecache').getlines({path!r}))"
            try:
                # "clipboard" context: pydevd sends the whole value, not a 64K preview.
                res = await self.dap.evaluate(expr, frame.get("id"), context="clipboard")
                text = ast.literal_eval(res.get("result", "''"))
                if isinstance(text, str) and len(text) <= MAX_SOURCE_CHARS:
                    lines = text.splitlines()
            except (DapError, ValueError, SyntaxError):
                lines = []
            if not lines and os.path.isfile(path):
                lines = _read_lines(path)
        self._sources[path] = lines
        return lines

    # -- variables -----------------------------------------------------------------

    async def scopes(self, frame: StackFrame) -> list[Scope]:
        return await self.dap.scopes(frame["id"])

    async def variables(self, reference: int) -> list[Variable]:
        """Children of a reference; tensors get ``shape dtype device`` as their value."""
        variables = await self.dap.variables(reference)
        tensors = [v for v in variables if v.get("type") in TENSOR_TYPES and v.get("evaluateName")][
            :16
        ]
        if tensors and self.frame is not None:
            summaries = await asyncio.gather(
                *(self._tensor_summary(v["evaluateName"]) for v in tensors),
                return_exceptions=True,
            )
            for var, summary in zip(tensors, summaries, strict=True):
                if isinstance(summary, str):
                    var["value"] = summary
        return variables

    async def _tensor_summary(self, name: str) -> str:
        if not _SAFE_NAME.match(name):
            raise ValueError(name)
        expr = f"(tuple({name}.shape), str({name}.dtype), str(getattr({name}, 'device', 'cpu')))"
        assert self.frame is not None
        res = await self.dap.evaluate(expr, self.frame.get("id"), context="watch")
        shape, dtype, device = ast.literal_eval(res.get("result", ""))
        dims = "×".join(str(d) for d in shape) or "scalar"
        return f"[{dims}] {dtype.removeprefix('torch.')} {device}"

    async def evaluate(self, expression: str) -> EvaluateResult:
        frame = self.frame
        return await self.dap.evaluate(
            expression, frame.get("id") if frame else None, context="repl"
        )

    # -- execution ---------------------------------------------------------------

    async def step(self, kind: str) -> None:
        """``continue`` / ``next`` / ``stepIn`` / ``stepOut`` on the followed thread."""
        if self.thread_id is None:
            raise RuntimeError("no paused thread")
        self.running = True
        actions = {
            "continue": self.dap.continue_,
            "next": self.dap.next,
            "stepIn": self.dap.step_in,
            "stepOut": self.dap.step_out,
        }
        try:
            await actions[kind](self.thread_id)
        except BaseException:
            self.running = False
            raise


def _read_lines(path: str) -> list[str]:
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            return f.read(MAX_SOURCE_CHARS).splitlines()
    except OSError:
        return []


def is_local(node_ip: str | None) -> bool:
    """Whether ``node_ip`` is one of this machine's addresses."""
    if not node_ip:
        return False
    try:
        import psutil

        addresses = {a.address for addrs in psutil.net_if_addrs().values() for a in addrs}
    except Exception:
        return False
    return node_ip in addresses
