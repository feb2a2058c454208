"""The suite's test doubles, defined once: a clock a test moves, the GCS's KV over a dict, a free port.

Fakes only what a unit test cannot have cheaply (a cluster's GCS, time passing); the real
paths are the e2e tests'. Tests import these by name (`from doubles import Clock`).
"""

from __future__ import annotations

import socket

from raydbg.config import NAMESPACE


class Clock:
    """A clock frozen but for what a test moves (`t`) or sleeps on it (each sleep recorded).

    Call it, or use `monotonic`, for the monotonic reading; `time` is a wall clock that moves
    a little on each reading (what is read twice differs) and with each sleep.
    """

    def __init__(self) -> None:
        self.t = 1000.0
        self.wall = 1.7e9
        self.sleeps: list[float] = []

    def __call__(self) -> float:
        return self.t

    def monotonic(self) -> float:
        return self.t

    def time(self) -> float:
        self.wall += 0.001
        return self.wall

    def sleep(self, seconds: float) -> None:
        self.sleeps.append(seconds)
        self.t += seconds
        self.wall += seconds


class FakeGcs:
    """The GcsClient KV calls raydbg makes, over a dict (`data`, key -> value) in raydbg's one
    namespace (a call naming another fails the test), with GCS's semantics: put without
    overwrite is put-if-absent; keys by prefix; delete by prefix. The real GCS path is
    tests/e2e/test_fuzz_gateway.py's and the e2e tests'."""

    def __init__(self, data: dict[bytes, bytes] | None = None) -> None:
        self.data: dict[bytes, bytes] = {} if data is None else data

    @staticmethod
    def _ns(ns: bytes) -> None:
        assert ns == NAMESPACE.encode(), f"a KV call in namespace {ns!r}, not raydbg's"

    def internal_kv_put(self, k: bytes, v: bytes, overwrite: bool, ns: bytes, timeout: float = 0) -> int:
        self._ns(ns)
        added = k not in self.data
        if added or overwrite:
            self.data[k] = v
        return int(added)

    def internal_kv_get(self, k: bytes, ns: bytes, timeout: float = 0) -> bytes | None:
        self._ns(ns)
        return self.data.get(k)

    def internal_kv_multi_get(self, keys: list[bytes], ns: bytes, timeout: float = 0) -> dict[bytes, bytes]:
        self._ns(ns)
        return {k: self.data[k] for k in keys if k in self.data}

    def internal_kv_del(self, k: bytes, by_prefix: bool, ns: bytes, timeout: float = 0) -> int:
        self._ns(ns)
        gone = [key for key in self.data if (key.startswith(k) if by_prefix else key == k)]
        for key in gone:
            del self.data[key]
        return len(gone)

    def internal_kv_keys(self, prefix: bytes, ns: bytes, timeout: float = 0) -> list[bytes]:
        self._ns(ns)
        return [k for k in self.data if k.startswith(prefix)]


def free_port() -> int:
    """A loopback TCP port the OS says is free now (for a rendezvous or a server a test starts)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])
