"""The registry: raydbg's records in Ray's GCS internal KV (namespace "raydbg")."""

from __future__ import annotations

import json
import time
from typing import Any

from raydbg.config import NAMESPACE

SESSION = "session/"
AGENT = "agent/"
EVENT = "event/"
GATEWAY = "gateway"
TOKEN = "token"


_NS = NAMESPACE.encode()
_TIMEOUT = 10.0
_client: Any = None


def use_client(client: Any) -> None:
    """Use this GcsClient (a process that never called ray.init, e.g. the CLI)."""
    global _client
    _client = client


def client_for(gcs_address: str) -> Any:
    """A GcsClient of another cluster, for a one-off read (the process-wide client stays)."""
    from ray._raylet import GcsClient  # type: ignore[attr-defined]

    return GcsClient(address=gcs_address)


def _gcs() -> Any:
    if _client is not None:
        return _client
    from ray.experimental import internal_kv

    return internal_kv.internal_kv_get_gcs_client()


def put(key: str, value: dict[str, Any] | bytes) -> None:
    data = value if isinstance(value, bytes) else json.dumps(value).encode()
    _gcs().internal_kv_put(key.encode(), data, True, _NS, timeout=_TIMEOUT)


def put_if_absent(key: str, data: bytes) -> bytes:
    """Store `data` unless the key exists; return what the key holds afterwards."""
    _gcs().internal_kv_put(key.encode(), data, False, _NS, timeout=_TIMEOUT)
    return get_bytes(key) or data


def get_bytes(key: str, gcs: Any = None) -> bytes | None:
    raw = (gcs or _gcs()).internal_kv_get(key.encode(), _NS, timeout=_TIMEOUT)
    return bytes(raw) if raw else None


def get(key: str, gcs: Any = None) -> dict[str, Any] | None:
    raw = get_bytes(key, gcs)
    return json.loads(raw) if raw else None


def delete(key: str) -> None:
    _gcs().internal_kv_del(key.encode(), False, _NS, timeout=_TIMEOUT)


def list_prefix(prefix: str) -> list[dict[str, Any]]:
    gcs = _gcs()
    keys = gcs.internal_kv_keys(prefix.encode(), _NS, timeout=_TIMEOUT)
    if not keys:
        return []
    values = gcs.internal_kv_multi_get(keys, _NS, timeout=_TIMEOUT)
    out = []
    for raw in values.values():
        if raw:
            try:
                out.append(json.loads(raw))
            except ValueError:
                continue
    return out


def sessions() -> list[dict[str, Any]]:
    recs = list_prefix(SESSION)
    recs.sort(key=lambda r: r.get("since", 0), reverse=True)
    return recs


def agents() -> list[dict[str, Any]]:
    return list_prefix(AGENT)


def record_event(kind: str, message: str, node_id: str = "", **details: Any) -> dict[str, Any]:
    import secrets

    now = time.time()
    event = {
        "id": secrets.token_hex(4),
        "ts": now,
        "kind": kind,
        "node_id": node_id,
        "message": message,
        "details": details,
    }
    put(f"{EVENT}{int(now * 1000):015d}-{event['id']}", event)
    return event


def events(limit: int = 100) -> list[dict[str, Any]]:
    evs = list_prefix(EVENT)
    evs.sort(key=lambda e: e.get("ts", 0), reverse=True)
    return evs[:limit]
