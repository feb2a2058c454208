"""The registry: raydbg's records in Ray's GCS internal KV (namespace "raydbg")."""

from __future__ import annotations

import atexit
import logging
import re
import threading
import time
from collections import Counter, OrderedDict
from typing import TYPE_CHECKING, Any

from raydbg import record_fit, validate
from raydbg.config import NAMESPACE

if TYPE_CHECKING:
    from raydbg.schema import Event, Record

SESSION = "session/"
AGENT = "agent/"
EVENT = "event/"
GATEWAY = "gateway"
AGENTS_STARTING = "agents-starting"  # {"since", "started_by"}: the gateway is on its way (raydbg.client waits)
TOKEN = "token"
_KINDS = {SESSION: "session", AGENT: "agent", EVENT: "event"}
_EVENT_KEY = re.compile(r"event/(\d{15})-[A-Za-z0-9_.-]{1,128}")

# The event log is bounded: the gateway agent keeps the newest N and nothing older than this.
EVENTS_KEEP = 1000
EVENTS_MAX_AGE_S = 7 * 24 * 3600.0

log = logging.getLogger("raydbg")


_NS = NAMESPACE.encode()
_TIMEOUT = 10.0
_client: Any = None
_release_at_exit = True


def use_client(client: Any) -> None:
    """Use this GcsClient (a process that never called ray.init, e.g. the CLI). It is let go
    at exit, before Ray's own atexit shutdown (registered when `ray` was imported, so it runs
    after this): the interpreter's teardown then frees no client Ray's threads still serve."""
    global _client, _release_at_exit
    _client = client
    if client is not None and _release_at_exit:
        _release_at_exit = False
        atexit.register(use_client, None)


def client_for(gcs_address: str) -> Any:
    """A GcsClient of another cluster, for a one-off read (the process-wide client stays)."""
    from raydbg import _ray_internals

    return _ray_internals.gcs_client(gcs_address)


def client() -> Any:
    """The GcsClient this process reads and writes raydbg's keys through."""
    if _client is not None:
        return _client
    from ray.experimental import internal_kv

    return internal_kv.internal_kv_get_gcs_client()


def put(key: str, value: dict[str, Any] | bytes) -> None:
    """Store `value`; a record (a dict) is cut to fit the readers' size cap (record_fit.py)."""
    data = value if isinstance(value, bytes) else record_fit.fit(value)
    client().internal_kv_put(key.encode(), data, True, _NS, timeout=_TIMEOUT)


def put_if_absent(key: str, data: bytes) -> bytes:
    """Store `data` unless the key exists; return what the key holds afterwards."""
    client().internal_kv_put(key.encode(), data, False, _NS, timeout=_TIMEOUT)
    return get_bytes(key) or data


def get_bytes(key: str, gcs: Any = None) -> bytes | None:
    raw = (gcs or client()).internal_kv_get(key.encode(), _NS, timeout=_TIMEOUT)
    return bytes(raw) if raw else None


def get(key: str, gcs: Any = None) -> dict[str, Any] | None:
    """The record at `key`, checked against its schema (None if absent or malformed)."""
    return lookup(key, gcs)[1]


def lookup(key: str, gcs: Any = None) -> tuple[bool, dict[str, Any] | None]:
    """(whether `key` holds anything, its checked record or None): a record that is there but
    cannot be read is (True, None), for its writer to delete."""
    raw = get_bytes(key, gcs)
    return (raw is not None), (_checked_one(key, raw) if raw else None)


def _checked_one(key: str, raw: bytes) -> dict[str, Any] | None:
    kind, suffix = _kind_of(key)
    try:
        if kind is None:
            value = validate.parse(raw)
            return value if isinstance(value, dict) else None
        return validate.record(kind, suffix, raw)
    except validate.Malformed as exc:
        _note_malformed(kind or "other", key, raw, exc)
        return None


def delete(key: str | bytes) -> None:
    """Remove `key` (bytes: as a listing gave it, whatever it holds)."""
    client().internal_kv_del(key if isinstance(key, bytes) else key.encode(), False, _NS, timeout=_TIMEOUT)


def _kind_of(key: str) -> tuple[str | None, str | None]:
    for prefix, kind in _KINDS.items():
        if key.startswith(prefix):
            return kind, key[len(prefix):]
    return ("gateway", None) if key == GATEWAY else (None, None)


def _keys(prefix: str) -> list[bytes]:
    keys = client().internal_kv_keys(prefix.encode(), _NS, timeout=_TIMEOUT)
    return [bytes(k) for k in keys or []]


def keys(prefix: str) -> list[str]:
    """Every key under `prefix`."""
    return [k.decode(errors="replace") for k in _keys(prefix)]


def multi_get(keys: list[str], timeout: float = _TIMEOUT) -> dict[str, bytes]:
    """The values of those of `keys` that are present, in one call."""
    if not keys:
        return {}
    found = client().internal_kv_multi_get([k.encode() for k in keys], _NS, timeout=timeout)
    return {(k.decode(errors="replace") if isinstance(k, bytes) else str(k)): bytes(v)
            for k, v in (found or {}).items() if v}


def _checked(keys: list[bytes], prefix: str, malformed: list[bytes] | None = None) -> list[dict[str, Any]]:
    """The valid records among `keys`; malformed ones are skipped and counted (and their keys
    added to `malformed`, when given)."""
    if not keys:
        return []
    values = client().internal_kv_multi_get(keys, _NS, timeout=_TIMEOUT)
    kind = _KINDS.get(prefix)
    out = []
    for key in keys:
        raw = values.get(key)
        if not raw:
            continue  # deleted between the listing and the read
        name = key.decode(errors="replace")
        try:
            if kind is None:  # a prefix with no schema: any JSON object
                value = validate.obj(validate.parse(bytes(raw)))
            else:
                value = validate.record(kind, name[len(prefix):], bytes(raw))
            out.append(value)
        except validate.Malformed as exc:
            _note_malformed(kind or "other", name, bytes(raw), exc)
            if malformed is not None:
                malformed.append(key)
    return out


def list_prefix(prefix: str, malformed: list[bytes] | None = None) -> list[dict[str, Any]]:
    """Every valid record under `prefix` (SESSION, AGENT, EVENT: checked by their schema);
    the keys of those that cannot be read are added to `malformed`, when given."""
    return _checked(_keys(prefix), prefix, malformed)


def sessions(malformed: list[bytes] | None = None) -> list[dict[str, Any]]:
    recs = list_prefix(SESSION, malformed)
    recs.sort(key=lambda r: r["since"], reverse=True)
    return recs


def agents() -> list[dict[str, Any]]:
    return list_prefix(AGENT)


def record_event(kind: str, message: str, node_id: str = "", details: Record | None = None,
                 **more: Any) -> dict[str, Any]:
    """Record an event (raydbg.schema.Event): its `details` the kind's struct (schema.py), or
    its fields (`more`, in the order written), checked against the kind's struct
    (schema.EVENT_DETAILS: validate.Malformed when they do not fit)."""
    import secrets

    import msgspec  # here: a worker imports the registry at setup, msgspec only to write

    from raydbg import schema

    fields: dict[str, Any] = msgspec.to_builtins(details) if details is not None else {}
    checked = validate.event_details(kind, {**fields, **more})
    return put_event(schema.Event(id=secrets.token_hex(4), ts=time.time(), kind=kind, node_id=node_id,
                                  message=validate.cap_text(message, validate.MAX_LONG_TEXT),
                                  details=checked))


def put_event(event: Event) -> dict[str, Any]:
    """Store `event` under its time-ordered key; the record as stored (before any cut)."""
    import msgspec

    record: dict[str, Any] = msgspec.to_builtins(event)
    put(f"{EVENT}{int(event.ts * 1000):015d}-{event.id}", record)
    return record


def events(limit: int = 100) -> list[dict[str, Any]]:
    """The newest `limit` valid events; only their keys and the newest values are read."""
    keys = sorted(_keys(EVENT), reverse=True)  # keys start with the time in ms, zero-padded
    out: list[dict[str, Any]] = []
    while keys and len(out) < limit:
        batch, keys = keys[:limit - len(out)], keys[limit - len(out):]
        out += _checked(batch, EVENT)
    out.sort(key=lambda e: e["ts"], reverse=True)
    return out[:limit]


def stale_event_keys(keys: list[str], now: float, keep: int, max_age_s: float) -> list[str]:
    """Event keys to prune: all but the newest `keep`, and any older than `max_age_s`.

    Only keys of raydbg's own shape (`event/<ms>-<id>`) are judged; others are left alone.
    """
    timed = []
    for key in keys:
        m = _EVENT_KEY.fullmatch(key)
        if m:
            timed.append((int(m.group(1)), key))
    timed.sort(reverse=True)
    cutoff_ms = (now - max_age_s) * 1000
    return [key for i, (ms, key) in enumerate(timed) if i >= keep or ms < cutoff_ms]


def prune_events(keep: int = EVENTS_KEEP, max_age_s: float = EVENTS_MAX_AGE_S) -> int:
    """Delete stale events (the gateway agent calls this now and then); returns how many."""
    keys = [k.decode(errors="replace") for k in _keys(EVENT)]
    stale = stale_event_keys(keys, time.time(), keep, max_age_s)
    for key in stale:
        delete(key)
    return len(stale)


# --- malformed records: skipped, and counted once per distinct (key, value) --------------
malformed: Counter[str] = Counter()
_seen: OrderedDict[tuple[str, int], None] = OrderedDict()
_SEEN_MAX = 4096
_seen_lock = threading.Lock()


def _note_malformed(kind: str, key: str, raw: bytes, exc: Exception) -> None:
    with _seen_lock:
        mark = (key, hash(raw))
        if mark in _seen:
            _seen.move_to_end(mark)
            return
        _seen[mark] = None
        if len(_seen) > _SEEN_MAX:
            _seen.popitem(last=False)
        malformed[kind] += 1
    log.warning("raydbg: skipped malformed %s record %s: %s", kind, validate.escape(key, 120),
                validate.escape(exc, 200))
    try:
        from raydbg import telemetry  # lazy: OpenTelemetry costs a pausing worker ~130 ms

        telemetry.counter("raydbg.registry.malformed", "{record}",
                          "Malformed records skipped in GCS KV").add(1, kind=kind)
    except Exception:
        log.debug("raydbg: no telemetry for malformed records", exc_info=True)
