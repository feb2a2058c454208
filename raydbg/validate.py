"""Checks of the records raydbg reads from GCS KV (session, agent, event, gateway), log escaping, text caps: pure, no Ray.

Anything may sit under raydbg's keys (another version, another job, a hand-made put), so
every record is checked before use against its struct (raydbg/schema.py): the fields
raydbg reads must have the right JSON type and a sane size, or the whole record is refused
(``Malformed``). Fields the struct does not name are kept as they are, so a newer writer's
additions pass through. Missing optional fields are filled with their defaults, so readers
can index them.
"""

from __future__ import annotations

import json
import math
import re
from typing import TYPE_CHECKING, Any, TypeGuard

from raydbg.record_rules import (
    CUT_NOTE,
    ID_PATTERN,
    MAX_LONG_TEXT,
    MAX_PID,
    MAX_RECORD_BYTES,
    MAX_TEXT,
)

if TYPE_CHECKING:
    from raydbg.schema import Record

# The limits' home is record_rules; they are read here too (validate.MAX_TEXT, ...).
__all__ = ["MAX_LONG_TEXT", "MAX_PID", "MAX_RECORD_BYTES", "MAX_TEXT"]  # and the functions below

# Caps applied where a session record is built (raydbg/worker/session.py).
EXC_MESSAGE_CHARS = 4000
EXC_TRACEBACK_CHARS = 16000

_ID = re.compile(ID_PATTERN)


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


def is_id(value: str) -> bool:
    """True for an id raydbg makes (session ids, node ids): safe in keys, URLs and logs."""
    return bool(_ID.fullmatch(value))


def is_pid(value: Any) -> TypeGuard[int]:
    """An int (not a bool) that can be a process id: 1 to MAX_PID (checked as records' pids are)."""
    return type(value) is int and 1 <= value <= MAX_PID


def obj(v: Any) -> dict[str, Any]:
    if not isinstance(v, dict):
        raise Malformed("expected an object")
    return v


# The record kinds stored under raydbg's keys, each checked against its struct (raydbg/schema.py,
# imported on the first check: a worker that writes no record never pays for msgspec).
SCHEMAS = {"session": "SessionRecord", "agent": "AgentRecord", "event": "Event", "gateway": "GatewayRecord"}
# The key suffix a record must match, so one record cannot shadow another's key.
KEY_FIELD = {"session": "id", "agent": "node_id"}


def check(cls: type[Record], value: Any, fill: bool = True) -> dict[str, Any]:
    """`value` (parsed JSON) as it is, with the defaults of the optional fields it lacks filled
    in (unless not `fill`); Malformed, in one line naming the first bad field, when it is not a `cls`."""
    import msgspec

    from raydbg import schema

    rec = obj(value)
    try:
        msgspec.convert(rec, cls)
    except msgspec.ValidationError as exc:
        raise Malformed(str(exc)) from None
    # The record as read (unknown fields kept, numbers and key order as written), then the
    # defaults of the fields it lacks.
    if not fill:
        return rec
    out = dict(rec)
    for name, default in schema.defaults(cls).items():
        out.setdefault(name, default)
    return out


def record(kind: str, key_suffix: str | None, raw: bytes) -> dict[str, Any]:
    """Parse and check one stored record of `kind`; `key_suffix` is its key after the prefix."""
    from raydbg import schema

    rec = check(getattr(schema, SCHEMAS[kind]), parse(raw))
    field = KEY_FIELD.get(kind)
    if field and key_suffix is not None and rec[field] != key_suffix:
        raise Malformed(f"{field} {rec[field]!r} does not match its key")
    if kind == "event" and CUT_NOTE.encode() not in raw:  # a cut record's markers stand in its lists
        event_details(rec["kind"], rec["details"])
    return rec


def event_details(kind: str, details: Any) -> dict[str, Any]:
    """An event's `details` as they are, checked against its kind's struct (schema.EVENT_DETAILS;
    a kind without one: any object); Malformed, in one line, when they are not."""
    from raydbg import schema

    cls = schema.EVENT_DETAILS.get(kind)
    if cls is None:
        return obj(details)
    try:
        return check(cls, details, fill=False)
    except Malformed as exc:
        raise Malformed(f"{kind} details: {exc}") from None


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
