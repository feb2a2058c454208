"""A read-only picture of a thread that cannot stop (blocked in C): its frames with their locals; runs in the worker's pause thread.

Taken from another thread while the pictured one sits in a C call (a collective wait, a
sleep, a lock), so nothing here may block or run the user's code, and what it costs is
bounded whatever the locals hold:
- only values of exact builtin types are rendered (`type(x) is dict`, never isinstance,
  which reads a `__class__` property); anything else, a subclass of a builtin too, shows
  its type's name, read through `type`'s own getters (never a metaclass's hooks);
- types are compared by identity only (`in`, `==` and hashing would call a metaclass's
  `__eq__`/`__hash__`); containers are read in their own order (sorting calls the keys'
  `__lt__`), at most ITEMS items and DEPTH levels, with "... N more" markers;
- a str or bytes is sliced before its repr, an int's size checked before its repr;
- a torch tensor or numpy array (those exact types) shows its shape, dtype and device,
  read through the C getters a static lookup finds on its type, each result checked by
  exact type (never its `__repr__`: a CUDA tensor's would wait on the very stream that hangs);
- a value gets at most VALUE_CHARS, a whole snapshot SNAPSHOT_BYTES of JSON.
"""

from __future__ import annotations

import itertools
import json
import sys
import types
from collections.abc import Callable, Iterable
from types import FrameType
from typing import Any

MAX_FRAMES = 40
MAX_LOCALS = 30  # per frame
REPR_CHARS = 160  # of a str or bytes
VALUE_CHARS = 2 * REPR_CHARS  # of one rendered value, containers included
SNAPSHOT_BYTES = 256 * 1024  # of the JSON of all frames' locals
ITEMS = 8  # per container
DEPTH = 3  # containers inside containers
INT_BITS = 1024  # larger ints show their size: the repr of a huge int is quadratic
NAME_CHARS = 200  # a type's, a local's name

# `type`'s own getters, called on a class directly: a metaclass's property or
# __getattribute__ of the same name is never consulted.
_QUALNAME = type.__dict__["__qualname__"]
_MODULE = type.__dict__["__module__"]
_MRO = type.__dict__["__mro__"]
_CLASS_DICT = type.__dict__["__dict__"]
_C_DESCRIPTORS = (types.GetSetDescriptorType, types.MemberDescriptorType)
_SCALARS = (type(None), bool, float, complex)  # their reprs are short and C


def _is_one_of(kind: type, kinds: Iterable[type]) -> bool:
    return any(kind is k for k in kinds)


def _more(n: int, what: str = "") -> str:
    return f"... {n} more" + (f" {what}" if what else "")


def _cut(text: str, room: int) -> str:
    return text if len(text) <= room else text[:max(0, room - 3)] + "..."


def type_name(kind: type) -> str:
    """`module.Qualname` (builtins: `Qualname`) of a class, running none of its metaclass's code."""
    try:
        qual, module = _QUALNAME.__get__(kind), _MODULE.__get__(kind)
    except Exception:
        return "?"
    qual = qual if type(qual) is str else "?"
    if type(module) is not str or module == "builtins":
        return _cut(qual, NAME_CHARS)
    return _cut(f"{module}.{qual}", NAME_CHARS)


def _static(kind: type, name: str) -> Any:
    """`name` as found in the class dicts along `kind`'s MRO (inspect.getattr_static's way), or None."""
    for klass in _MRO.__get__(kind):
        found = _CLASS_DICT.__get__(klass).get(name)
        if found is not None:
            return found
    return None


def _c_getter(value: Any, name: str) -> Any:
    """The value of `name` if `type(value)` has it as a C getset or member descriptor, else None."""
    kind = type(value)
    slot = _static(kind, name)
    if slot is None or not _is_one_of(type(slot), _C_DESCRIPTORS):
        return None
    return slot.__get__(value, kind)


# --- arrays: the exact types of the libraries already loaded --------------------------
def _module_attr(module: str, *path: str) -> Any:
    """`module.a.b` through the modules' own dicts, without importing anything."""
    got: Any = sys.modules.get(module)
    for name in path:
        if type(got) is not types.ModuleType:
            return None
        got = got.__dict__.get(name)
    return got


def _shape(value: Any) -> str | None:
    shape = _c_getter(value, "shape")
    if shape is None or not (type(shape) is tuple or type(shape) is _module_attr("torch", "Size")):
        return None
    dims = [tuple.__getitem__(shape, i) for i in range(min(tuple.__len__(shape), 64))]
    if not all(type(d) is int for d in dims):
        return None
    return "(" + ", ".join(str(d) for d in dims) + ("," if len(dims) == 1 else "") + ")"


def _torch_text(value: Any, name: str, kind_path: tuple[str, ...]) -> str | None:
    got = _c_getter(value, name)
    return str(got) if got is not None and type(got) is _module_attr("torch", *kind_path) else None


def _numpy_dtype(value: Any) -> str | None:
    dtype = _c_getter(value, "dtype")
    base = _module_attr("numpy", "dtype")
    if dtype is None or base is None or not _is_one_of(base, _MRO.__get__(type(dtype))):
        return None
    kind, size = _c_getter(dtype, "kind"), _c_getter(dtype, "itemsize")
    if type(kind) is not str or type(size) is not int:
        return None
    names = {"f": "float", "i": "int", "u": "uint", "c": "complex"}
    return "bool" if kind == "b" else f"{names[kind]}{size * 8}" if kind in names else f"{kind}{size}"


def _array(value: Any, kind: type) -> str | None:
    """`<torch.Tensor shape=... dtype=... device=...>` for the known array types, else None."""
    torch_types = (_module_attr("torch", "Tensor"), _module_attr("torch", "nn", "Parameter"))
    if _is_one_of(kind, [t for t in torch_types if t is not None]):
        parts = {"shape": _shape(value), "dtype": _torch_text(value, "dtype", ("dtype",)),
                 "device": _torch_text(value, "device", ("device",))}
    elif kind is _module_attr("numpy", "ndarray"):
        parts = {"shape": _shape(value), "dtype": _numpy_dtype(value)}
    else:
        return None
    shown = " ".join(f"{k}={_cut(v, 64)}" for k, v in parts.items() if v is not None)
    return f"<{type_name(kind)} {shown}>" if shown else None


# --- builtins -------------------------------------------------------------------------
def _sliced(value: str | bytes | bytearray, unit: str, room: int) -> str:
    """The repr of at most REPR_CHARS of `value` (sliced first: a 200 MB bytes is never
    repr'd whole), fewer where their escapes would not fit `room`, and how many more."""
    n = len(value)
    k = min(n, REPR_CHARS)
    while True:
        shown = repr(value[:k])
        tail = f" {_more(n - k, unit)}" if k < n else ""
        if len(shown) + len(tail) <= room or k == 0:
            return shown + tail
        k = min(k - 1, k * max(0, room - len(tail)) // len(shown))


def _joined(open_: str, close: str, total: int, pieces: Iterable[Callable[[int], str]], room: int) -> str:
    """`open_ a, b, ... N more close`, the pieces rendered with what room is left."""
    parts: list[str] = []
    used = len(open_) + len(close)
    reserve = len(_more(total)) + 2
    for render in pieces:
        left = room - used - reserve
        if left <= 0:
            break
        text = render(left)
        parts.append(text)
        used += len(text) + 2
    if len(parts) < total:
        parts.append(_more(total - len(parts)))
    return open_ + ", ".join(parts) + close


def _container(value: Any, kind: type, depth: int, room: int) -> str | None:
    if kind is list or kind is tuple:
        open_, close = ("[", "]") if kind is list else ("(", ")")
        n = len(value)
        if depth >= DEPTH and n:
            return f"{open_}...{close}"
        items = value[:ITEMS]  # an exact list's or tuple's slice: C, ITEMS references
        text = _joined(open_, close, n, (_item(x, depth) for x in items), room)
        return text[:-1] + ",)" if kind is tuple and n == 1 and not text.endswith("more)") else text
    if kind is dict:
        n = len(value)
        if depth >= DEPTH and n:
            return "{...}"
        pairs = itertools.islice(dict.items(value), ITEMS)  # the dict's own order: no key compared
        return _joined("{", "}", n, (_pair(k, v, depth) for k, v in pairs), room)
    if kind is set or kind is frozenset:
        n = len(value)
        name = "set" if kind is set else "frozenset"
        if not n:
            return f"{name}()"
        if depth >= DEPTH:
            return "{...}" if kind is set else "frozenset({...})"
        items = itertools.islice(iter(value), ITEMS)
        text = _joined("{", "}", n, (_item(x, depth) for x in items), room)
        return text if kind is set else f"frozenset({text})"
    return None


def _item(value: Any, depth: int) -> Callable[[int], str]:
    return lambda room: _render(value, depth + 1, room)


def _pair(key: Any, value: Any, depth: int) -> Callable[[int], str]:
    def render(room: int) -> str:
        k = _render(key, depth + 1, room // 2)
        return f"{k}: {_render(value, depth + 1, room - len(k) - 2)}"
    return render


def _render(value: Any, depth: int, room: int) -> str:
    kind = type(value)  # the C slot: never a `__class__` property
    if kind is str:
        text = _sliced(value, "chars", room)
    elif kind is bytes or kind is bytearray:
        text = _sliced(value, "bytes", room)
    elif kind is int:
        bits = value.bit_length()
        text = repr(value) if bits <= INT_BITS else f"<int of {bits} bits>"
    elif _is_one_of(kind, _SCALARS):
        text = repr(value)
    elif kind is range:
        text = f"range({_render(value.start, depth, 64)}, {_render(value.stop, depth, 64)}, {_render(value.step, depth, 64)})"
    else:
        text = _container(value, kind, depth, room) or _array(value, kind) or f"<{type_name(kind)}>"
    return _cut(text, room)


def safe_repr(value: Any) -> str:
    """A bounded description of `value` (at most VALUE_CHARS) that runs none of its own code."""
    try:
        return _render(value, 0, VALUE_CHARS)
    except Exception as exc:  # changed by another thread meanwhile, or out of memory: say so
        return f"<unrepresentable: {type(exc).__name__}>"


# --- frames ---------------------------------------------------------------------------
def _plain_locals_type() -> type:
    return type(sys._getframe().f_locals)  # dict; 3.13+: FrameLocalsProxy


_PLAIN_LOCALS = (dict, _plain_locals_type())


def _locals_of(frame: FrameType) -> Any:
    """The frame's locals as a dict or frame proxy; None for a class body's own mapping
    (a metaclass's __prepare__ can make it anything)."""
    try:
        found = frame.f_locals
    except Exception:
        return None
    return found if _is_one_of(type(found), _PLAIN_LOCALS) else None


def _json_size(text: str) -> int:
    return len(json.dumps(text))  # with its \u escapes: what the record will hold


def _frame(frame: FrameType, budget: list[int]) -> dict[str, Any]:
    """One frame: function, file, line, and as many locals as MAX_LOCALS and `budget[0]`
    (JSON bytes left for the snapshot, spent here) allow, then a "..." entry saying how many more."""
    code = frame.f_code
    out: dict[str, Any] = {
        "function": _cut(getattr(code, "co_qualname", code.co_name), 1024),
        "file": _cut(code.co_filename, 1024),
        "line": frame.f_lineno,
        "locals": {},
    }
    names = _locals_of(frame)
    if names is None:
        return out
    total, spent = len(names), False
    for name, value in itertools.islice(names.items(), MAX_LOCALS):
        key = _cut(name, NAME_CHARS) if type(name) is str else safe_repr(name)
        text = safe_repr(value)
        cost = _json_size(key) + _json_size(text) + 2
        if cost > budget[0]:
            spent = True
            break
        budget[0] -= cost
        out["locals"][key] = text
    left = total - len(out["locals"])
    if left:
        why = f" (the snapshot budget of {SNAPSHOT_BYTES // 1024} KiB is spent)" if spent else ""
        out["locals"]["..."] = _more(left, "locals") + why
    return out


def frames_of(top: FrameType | None) -> list[dict[str, Any]]:
    """Innermost first: function, file, line and locals ({name: safe repr}) of each frame,
    at most MAX_FRAMES (then one "... N more frames" entry) and SNAPSHOT_BYTES of locals;
    `user: true` where the worker's roots make a frame the user's and its path would not
    (as the stacks mark theirs: raydbg/user_code.py)."""
    from raydbg.worker import user_roots

    roots = user_roots.current()
    out: list[dict[str, Any]] = []
    budget = [SNAPSHOT_BYTES]
    frame = top
    while frame is not None and len(out) < MAX_FRAMES:
        entry = _frame(frame, budget)
        if roots.adds(frame.f_code.co_filename):
            entry["user"] = True
        out.append(entry)
        frame = frame.f_back
    more = 0
    while frame is not None and more < 100_000:
        more += 1
        frame = frame.f_back
    if more:
        out.append({"function": _more(more, "frames"), "file": "", "line": 0, "locals": {}})
    return out
