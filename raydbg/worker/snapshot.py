"""A read-only picture of a thread that cannot stop (blocked in C): its frames with their locals.

Taken from another thread while the pictured one sits in a C call (a collective wait, a
sleep, a lock), so nothing here may block or run the user's code: only values of builtin
types are rendered (reprlib, bounded); any other object shows its type, and for
array-likes (torch tensors, numpy arrays) its shape, dtype and device read as attributes,
never through its __repr__ (a CUDA tensor's would wait on the very stream that hangs).
"""

from __future__ import annotations

import reprlib
from types import FrameType
from typing import Any

MAX_FRAMES = 40
MAX_LOCALS = 30  # per frame
REPR_CHARS = 160
_BUILTIN = (type(None), bool, int, float, complex, str, bytes, bytearray, range, list, tuple, dict, set, frozenset)
_ARRAY_ATTRS = ("shape", "dtype", "device")

_repr = reprlib.Repr()
_repr.maxstring = _repr.maxother = REPR_CHARS
_repr.maxlist = _repr.maxtuple = _repr.maxdict = _repr.maxset = _repr.maxfrozenset = 8
_repr.maxlevel = 3


def _containers_only_builtin(value: Any, depth: int = 0) -> bool:
    """reprlib calls repr() on what a container holds: allow only builtins all the way down."""
    if not isinstance(value, _BUILTIN):
        return False
    if depth >= _repr.maxlevel or not isinstance(value, (list, tuple, dict, set, frozenset)):
        return True
    items = list(value.items())[: _repr.maxdict] if isinstance(value, dict) else list(value)[: _repr.maxlist]
    flat = [x for kv in items for x in kv] if isinstance(value, dict) else items
    return all(_containers_only_builtin(x, depth + 1) for x in flat)


def safe_repr(value: Any) -> str:
    """A bounded description of `value` that runs none of its own code."""
    try:
        if type(value) in _BUILTIN and _containers_only_builtin(value):
            return _repr.repr(value)[: REPR_CHARS * 2]
        kind = type(value)
        name = f"{kind.__module__}.{kind.__qualname__}" if kind.__module__ != "builtins" else kind.__qualname__
        if all(_has_plain(value, a) for a in _ARRAY_ATTRS[:2]):
            parts = [f"{a}={_attr_text(value, a)}" for a in _ARRAY_ATTRS if _has_plain(value, a)]
            return f"<{name} {' '.join(parts)}>"
        return f"<{name}>"
    except Exception as exc:  # a metaclass or a slot that raises: say so, never propagate
        return f"<unrepresentable: {type(exc).__name__}>"


def _has_plain(value: Any, attr: str) -> bool:
    # Only a data attribute of the type (tensors' shape/dtype/device are C getsets), not a
    # Python property or __getattr__ that could run anything.
    slot = getattr(type(value), attr, None)
    return slot is not None and type(slot).__name__ in ("getset_descriptor", "member_descriptor")


def _attr_text(value: Any, attr: str) -> str:
    got = getattr(value, attr)
    if attr == "shape":
        return _repr.repr(tuple(got))
    if type(got).__module__ in ("torch", "numpy", "builtins"):  # a dtype or device: plain text
        return str(got)[:64]
    return f"<{type(got).__qualname__}>"


def frames_of(top: FrameType | None) -> list[dict[str, Any]]:
    """Innermost first: function, file, line and locals ({name: safe repr}) of each frame."""
    out: list[dict[str, Any]] = []
    frame = top
    while frame is not None and len(out) < MAX_FRAMES:
        code = frame.f_code
        try:
            names = list(frame.f_locals.items())[:MAX_LOCALS]
        except Exception:
            names = []
        out.append({
            "function": getattr(code, "co_qualname", code.co_name),
            "file": code.co_filename,
            "line": frame.f_lineno,
            "locals": {str(k): safe_repr(v) for k, v in names},
        })
        frame = frame.f_back
    return out
