"""Schemas of the records raydbg reads from GCS KV (session, agent, event, gateway): pure, no Ray.

Anything may sit under raydbg's keys (another version, another job, a hand-made put), so
every record is checked before use: the fields raydbg reads must have the right JSON
type and a sane size, or the whole record is refused (``Malformed``). Fields the schema
does not name are kept as they are, so a newer writer's additions pass through.
Missing optional fields are filled with their defaults, so readers can index them.
"""

from __future__ import annotations

import ipaddress
import json
import math
import re
from collections.abc import Callable
from typing import Any, TypeGuard

MAX_RECORD_BYTES = 1024 * 1024
MAX_TEXT = 4096  # names, paths, ids
MAX_LONG_TEXT = 64 * 1024  # exception message and traceback, event message

# Caps applied where a session record is built (raydbg/worker/session.py).
EXC_MESSAGE_CHARS = 4000
EXC_TRACEBACK_CHARS = 16000

_ID = re.compile(r"[A-Za-z0-9_.-]{1,128}")
_SESSION_STATES = ("starting", "waiting", "attached", "snapshot")


class Malformed(ValueError):
    """A record that is not what raydbg writes; the message says which field."""


def _no_constants(name: str) -> Any:
    raise Malformed(f"non-finite number {name}")


def _finite(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):  # 1e400
        raise Malformed(f"non-finite number {text[:32]}")
    return value


def parse(raw: bytes) -> Any:
    """JSON, strictly: size-capped, no NaN/Infinity (aiohttp would re-emit them as invalid JSON),
    nesting as deep as the interpreter's recursion limit allows (deeper: Malformed)."""
    if len(raw) > MAX_RECORD_BYTES:
        raise Malformed(f"record of {len(raw)} bytes is over {MAX_RECORD_BYTES}")
    try:
        return json.loads(raw, parse_constant=_no_constants, parse_float=_finite)
    except Malformed:
        raise
    except (ValueError, RecursionError) as exc:
        raise Malformed(f"not JSON: {type(exc).__name__}") from None


# --- field checkers: each returns the value or raises Malformed ---------------------------
Check = Callable[[Any], Any]


def is_id(value: str) -> bool:
    """True for an id raydbg makes (session ids, node ids): safe in keys, URLs and logs."""
    return bool(_ID.fullmatch(value))


def text(limit: int = MAX_TEXT) -> Check:
    def check(v: Any) -> Any:
        if not isinstance(v, str) or len(v) > limit:
            raise Malformed("expected a string" if not isinstance(v, str) else f"string over {limit}")
        return v
    return check


def ident(v: Any) -> str:
    if not isinstance(v, str) or not _ID.fullmatch(v):
        raise Malformed("expected an id of [A-Za-z0-9_.-]{1,128}")
    return v


def integer(lo: int, hi: int) -> Check:
    def check(v: Any) -> Any:
        if isinstance(v, bool) or not isinstance(v, int) or not lo <= v <= hi:
            raise Malformed(f"expected an integer in [{lo}, {hi}]")
        return v
    return check


def number(v: Any) -> float:
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v):
        raise Malformed("expected a finite number")
    return v


def boolean(v: Any) -> bool:
    if not isinstance(v, bool):
        raise Malformed("expected true or false")
    return v


def one_of(*values: str) -> Check:
    def check(v: Any) -> Any:
        if v not in values:
            raise Malformed(f"expected one of {values}")
        return v
    return check


def optional(inner: Check) -> Check:
    def check(v: Any) -> Any:
        return None if v is None else inner(v)
    return check


def is_pid(value: Any) -> TypeGuard[int]:
    """An int (not a bool) that can be a process id: 1 to MAX_PID (checked as records' pids are)."""
    try:
        _PID(value)
    except Malformed:
        return False
    return True


def ip_address(v: Any) -> str:
    try:
        ipaddress.ip_address(text(64)(v))
    except ValueError:
        raise Malformed("expected an IP address") from None
    return str(v)


def obj(v: Any) -> dict[str, Any]:
    if not isinstance(v, dict):
        raise Malformed("expected an object")
    return v


def exception(v: Any) -> dict[str, str]:
    exc = obj(v)
    for key in ("type", "message", "traceback"):
        if key in exc:
            text(MAX_LONG_TEXT)(exc[key])
    return exc


def memory(v: Any) -> dict[str, int]:
    mem = obj(v)
    for key in ("used", "limit"):
        integer(0, 2**62)(mem.get(key))
    return mem


def list_of_objects(v: Any) -> list[Any]:
    if not isinstance(v, list) or not all(isinstance(x, dict) for x in v):
        raise Malformed("expected a list of objects")
    return v


MAX_PID = 2**31 - 1
_PID = integer(1, MAX_PID)
_RANK = optional(integer(0, 2**31 - 1))
_OPT_TEXT = optional(text())
_OPT_ID = optional(ident)

# name -> (checker, required, default when missing)
Schema = dict[str, tuple[Check, bool, Any]]

SESSION: Schema = {
    "id": (ident, True, None),
    "job_id": (text(), True, None),
    "pid": (_PID, True, None),
    "thread_id": (integer(0, 2**64), True, None),
    "thread_name": (text(), True, None),
    "file": (text(), True, None),
    "line": (integer(0, 2**31 - 1), True, None),
    "function": (text(), True, None),
    "reason": (text(64), True, None),
    "node_id": (text(), False, ""),
    "node_ip": (text(64), False, ""),
    "task_id": (_OPT_TEXT, False, None),
    "task_name": (_OPT_TEXT, False, None),
    "actor_id": (_OPT_TEXT, False, None),
    "actor_name": (_OPT_TEXT, False, None),
    "train_run": (_OPT_TEXT, False, None),
    "train_rank": (_RANK, False, None),
    "train_local_rank": (_RANK, False, None),
    "train_world_size": (optional(integer(1, 2**31 - 1)), False, None),
    "group": (_OPT_TEXT, False, None),
    "breakpoint_id": (_OPT_ID, False, None),
    "exception": (optional(exception), False, None),
    "since": (number, False, 0.0),
    "state": (one_of(*_SESSION_STATES), False, "starting"),
    "attachable": (boolean, False, False),
    "cwd": (text(), False, ""),
    "port": (optional(integer(1, 65535)), False, None),
    "socket": (_OPT_TEXT, False, None),
    "frames": (optional(list_of_objects), False, None),
}

AGENT: Schema = {
    "node_id": (ident, True, None),
    "node_ip": (ip_address, True, None),
    "port": (integer(1, 65535), True, None),
    "pid": (_PID, False, None),
    "version": (text(64), False, ""),
    "python": (text(64), False, ""),  # the node's Python and Ray versions (`raydbg status`)
    "ray": (text(64), False, ""),
    "is_head": (boolean, False, False),
    "started_at": (number, False, 0.0),
    "heartbeat": (optional(number), False, None),
    "memory": (optional(memory), False, None),
    "workers": (optional(integer(0, 2**31 - 1)), False, None),
    "gpus": (list_of_objects, False, []),
}

EVENT: Schema = {
    "id": (ident, True, None),
    "ts": (number, True, None),
    "kind": (text(128), True, None),
    "node_id": (text(), False, ""),
    "message": (text(MAX_LONG_TEXT), False, ""),
    "details": (obj, False, {}),
}

GATEWAY: Schema = {
    "address": (text(256), True, None),
    "node_id": (text(), False, ""),
    "pid": (optional(_PID), False, None),
    "version": (text(64), False, ""),
    "gcs_address": (text(256), False, ""),
}


def check(schema: Schema, value: Any) -> dict[str, Any]:
    """The record with defaults filled in, or Malformed naming the first bad field."""
    rec = obj(value)
    out = dict(rec)
    for name, (checker, required, default) in schema.items():
        if name not in rec:
            if required:
                raise Malformed(f"missing field {name!r}")
            out[name] = _copy(default)
            continue
        try:
            checker(rec[name])
        except Malformed as exc:
            raise Malformed(f"field {name!r}: {exc}") from None
    return out


def _copy(default: Any) -> Any:
    return type(default)() if isinstance(default, (dict, list)) else default


SCHEMAS: dict[str, Schema] = {"session": SESSION, "agent": AGENT, "event": EVENT, "gateway": GATEWAY}
# The key suffix a record must match, so one record cannot shadow another's key.
KEY_FIELD = {"session": "id", "agent": "node_id"}


def record(kind: str, key_suffix: str | None, raw: bytes) -> dict[str, Any]:
    """Parse and check one stored record of `kind`; `key_suffix` is its key after the prefix."""
    rec = check(SCHEMAS[kind], parse(raw))
    field = KEY_FIELD.get(kind)
    if field and key_suffix is not None and rec[field] != key_suffix:
        raise Malformed(f"{field} {rec[field]!r} does not match its key")
    return rec


_UNSAFE = re.compile(r"[\x00-\x1f\x7f-\x9f\u2028\u2029\\]")


def _escaped(m: re.Match[str]) -> str:
    c = m.group()
    if c == "\\":
        return "\\\\"
    return f"\\x{ord(c):02x}" if ord(c) < 0x100 else f"\\u{ord(c):04x}"


def escape(value: object, limit: int = 256) -> str:
    """Client-controlled text made safe for one log line: control characters escaped, capped."""
    s = str(value)
    out = _UNSAFE.sub(_escaped, s[:limit])
    return out + ("..." if len(s) > limit else "")


def cap_text(s: str, limit: int, keep: str = "head") -> str:
    """`s` cut to at most `limit` characters, saying how much was cut (keep "head" or "tail")."""
    if len(s) <= limit:
        return s
    note = f"... [{len(s) - limit} characters cut] ..."
    room = max(0, limit - len(note))
    return s[:room] + note if keep == "head" else note + s[len(s) - room:]
