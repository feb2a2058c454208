"""The GcsClient KV calls raydbg's registry makes, over a dict: for unit tests without a cluster
(the real GCS path is tests/test_fuzz_gateway.py's and the e2e tests')."""

from __future__ import annotations


class DictKv:
    """GCS's semantics: put without overwrite is put-if-absent; keys by prefix; delete by prefix."""

    def __init__(self) -> None:
        self.data: dict[bytes, bytes] = {}

    def internal_kv_put(self, k: bytes, v: bytes, overwrite: bool, ns: bytes, timeout: float = 0) -> int:
        added = k not in self.data
        if added or overwrite:
            self.data[k] = v
        return int(added)

    def internal_kv_get(self, k: bytes, ns: bytes, timeout: float = 0) -> bytes | None:
        return self.data.get(k)

    def internal_kv_multi_get(self, keys: list[bytes], ns: bytes, timeout: float = 0) -> dict[bytes, bytes]:
        return {k: self.data[k] for k in keys if k in self.data}

    def internal_kv_del(self, k: bytes, by_prefix: bool, ns: bytes, timeout: float = 0) -> int:
        gone = [key for key in self.data if (key.startswith(k) if by_prefix else key == k)]
        for key in gone:
            del self.data[key]
        return len(gone)

    def internal_kv_keys(self, prefix: bytes, ns: bytes, timeout: float = 0) -> list[bytes]:
        return [k for k in self.data if k.startswith(prefix)]
