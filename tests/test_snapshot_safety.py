"""A pause snapshot's safe repr never runs the user's code and costs a bounded time and memory
(raydbg/worker/snapshot.py): hostile objects of every kind the old repr fell for, huge locals.

Each hostile method appends to RAN; every test asserts nothing ran, and what was rendered.
"""

from __future__ import annotations

import ast
import json
import sys
import threading
import time
import tracemalloc
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from raydbg.worker import snapshot

RAN: list[str] = []


@pytest.fixture(autouse=True)
def _clean() -> Iterator[None]:
    RAN.clear()
    yield
    RAN.clear()


def ran(what: str) -> None:
    RAN.append(what)


class Key:
    """A dict key whose every hook records (construction hashes it: RAN is cleared after)."""

    def __hash__(self) -> int:
        ran("__hash__")
        return 7

    def __eq__(self, other: object) -> bool:
        ran("__eq__")
        return self is other

    def __lt__(self, other: object) -> bool:
        ran("__lt__")
        return True

    def __gt__(self, other: object) -> bool:
        ran("__gt__")
        return False

    def __repr__(self) -> str:
        ran("__repr__")
        return "Key()"

    def __str__(self) -> str:
        ran("__str__")
        return "Key"


def test_a_dict_with_a_hostile_key_is_neither_sorted_nor_its_keys_repr_d() -> None:
    # Eight plain keys first: the old repr checked only the first eight, then sorted them all.
    d: dict[Any, Any] = {i: i for i in range(8)}
    d[Key()] = "v"
    RAN.clear()
    out = snapshot.safe_repr(d)
    assert RAN == []
    assert out == "{0: 0, 1: 1, 2: 2, 3: 3, 4: 4, 5: 5, 6: 6, 7: 7, ... 1 more}"
    # Read in the dict's own order, the hostile key shows by its type only.
    small = {Key(): 1, "b": 2}
    RAN.clear()
    assert snapshot.safe_repr(small) == f"{{<{__name__}.Key>: 1, 'b': 2}}" and RAN == []


class MyDict(dict):  # type: ignore[type-arg]
    def __repr__(self) -> str:
        ran("dict.__repr__")
        return "MyDict"

    def items(self) -> Any:
        ran("dict.items")
        return super().items()

    def __iter__(self) -> Any:
        ran("dict.__iter__")
        return super().__iter__()

    def __len__(self) -> int:
        ran("dict.__len__")
        return 1


class MyList(list):  # type: ignore[type-arg]
    def __repr__(self) -> str:
        ran("list.__repr__")
        return "MyList"

    def __iter__(self) -> Any:
        ran("list.__iter__")
        return super().__iter__()

    def __len__(self) -> int:
        ran("list.__len__")
        return 1

    def __getitem__(self, i: Any) -> Any:
        ran("list.__getitem__")
        return super().__getitem__(i)


class MyStr(str):
    def __repr__(self) -> str:
        ran("str.__repr__")
        return "MyStr"

    def __len__(self) -> int:
        ran("str.__len__")
        return 1

    def __getitem__(self, i: Any) -> Any:
        ran("str.__getitem__")
        return super().__getitem__(i)


def test_subclasses_of_builtins_show_their_type_only_even_inside_a_builtin_container() -> None:
    values = [MyDict(a=1), MyList([1, 2]), MyStr("s")]
    out = snapshot.safe_repr(values)
    assert RAN == []
    assert out == f"[<{__name__}.MyDict>, <{__name__}.MyList>, <{__name__}.MyStr>]"
    assert snapshot.safe_repr({"k": MyDict(a=1)}) == f"{{'k': <{__name__}.MyDict>}}" and RAN == []
    for v in values:
        assert snapshot.safe_repr(v) == f"<{__name__}.{type(v).__qualname__}>"
    assert RAN == []


class FakeList:
    """Claims to be a list through `__class__`: isinstance believes it (and runs the property)."""

    @property  # type: ignore[misc]
    def __class__(self) -> type:
        ran("__class__")
        return list

    def __iter__(self) -> Any:
        ran("__iter__")
        return iter([1])


class Spy:
    """Records every attribute read on the instance."""

    def __getattribute__(self, name: str) -> Any:
        ran(f"__getattribute__ {name}")
        return object.__getattribute__(self, name)

    def __getattr__(self, name: str) -> Any:
        ran(f"__getattr__ {name}")
        raise AttributeError(name)


def test_an_object_with_a_class_property_or_attribute_hooks_is_not_asked_anything() -> None:
    assert snapshot.safe_repr([FakeList()]) == f"[<{__name__}.FakeList>]"
    assert snapshot.safe_repr(FakeList()) == f"<{__name__}.FakeList>"
    assert snapshot.safe_repr([Spy()]) == f"[<{__name__}.Spy>]"
    assert snapshot.safe_repr(Spy()) == f"<{__name__}.Spy>"
    assert RAN == []


class Slotted:
    """C member descriptors named like a tensor's attributes: an empty one falls to __getattr__,
    a full one holds objects whose hooks record."""

    __slots__ = ("shape", "dtype", "device")

    def __getattr__(self, name: str) -> Any:
        ran(f"__getattr__ {name}")
        raise AttributeError(name)


class Hooks:
    def __iter__(self) -> Any:
        ran("shape.__iter__")
        return iter([1, 2])

    def __str__(self) -> str:
        ran("dtype.__str__")
        return "float32"


Hooks.__module__ = "numpy"  # a value that claims to be numpy's


class getset_descriptor:  # noqa: N801  named like CPython's C descriptor type
    def __get__(self, obj: Any, kind: Any = None) -> Any:
        ran("descriptor.__get__")
        return (1,)


class PropertyTensor:
    shape = property(lambda self: ran("shape property") or (1,))
    dtype = property(lambda self: ran("dtype property") or "f")
    device = property(lambda self: ran("device property") or "cpu")


class DescriptorTensor:
    shape = getset_descriptor()
    dtype = getset_descriptor()
    device = getset_descriptor()


def test_shape_dtype_and_device_of_non_array_types_are_never_read() -> None:
    empty = Slotted()
    full = Slotted()
    full.shape, full.dtype, full.device = Hooks(), Hooks(), Hooks()
    for value in (empty, full, PropertyTensor(), DescriptorTensor()):
        assert snapshot.safe_repr(value) == f"<{__name__}.{type(value).__qualname__}>"
        assert snapshot.safe_repr([value]) == f"[<{__name__}.{type(value).__qualname__}>]"
    assert RAN == []


class Meta(type):
    """A metaclass whose every hook on its classes records."""

    def __getattribute__(cls, name: str) -> Any:
        ran(f"meta.__getattribute__ {name}")
        return type.__getattribute__(cls, name)

    def __getattr__(cls, name: str) -> Any:
        ran(f"meta.__getattr__ {name}")
        raise AttributeError(name)

    def __repr__(cls) -> str:
        ran("meta.__repr__")
        return "Meta"

    def __eq__(cls, other: object) -> bool:
        ran("meta.__eq__")
        return cls is other

    def __hash__(cls) -> int:
        ran("meta.__hash__")
        return 1

    @property
    def __name__(cls) -> str:  # type: ignore[override]
        ran("meta.__name__")
        return "Evil"

    @property
    def shape(cls) -> Any:
        ran("meta.shape")
        return (1,)


class Hostile(metaclass=Meta):
    pass


def test_a_metaclass_with_hostile_hooks_never_runs() -> None:
    obj = Hostile()
    RAN.clear()
    assert snapshot.safe_repr(obj) == f"<{__name__}.Hostile>"
    assert snapshot.safe_repr([obj, {1: obj}]) == f"[<{__name__}.Hostile>, {{1: <{__name__}.Hostile>}}]"
    assert snapshot.safe_repr(Hostile) == f"<{__name__}.Meta>"  # the class itself: its type's name
    assert RAN == []


def test_a_torch_tensor_subclass_with_torch_function_is_not_asked_for_its_shape() -> None:
    torch = pytest.importorskip("torch", reason="torch: the main suite's venv has the CPU build")

    class Watched(torch.Tensor):
        @classmethod
        def __torch_function__(cls, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
            ran("__torch_function__")
            return super().__torch_function__(func, types, args, kwargs or {})

    t = torch.zeros(2, 3).as_subclass(Watched)
    RAN.clear()
    assert snapshot.safe_repr(t) == f"<{__name__}.{Watched.__qualname__}>" and RAN == []
    plain = snapshot.safe_repr(torch.zeros(2, 3, dtype=torch.int64))
    assert plain == "<torch.Tensor shape=(2, 3) dtype=torch.int64 device=cpu>"
    param = snapshot.safe_repr(torch.nn.Parameter(torch.zeros(5)))
    assert param == "<torch.nn.parameter.Parameter shape=(5,) dtype=torch.float32 device=cpu>"


def test_a_numpy_array_shows_shape_and_dtype() -> None:
    np = pytest.importorskip("numpy")
    assert snapshot.safe_repr(np.zeros((3, 4), dtype=np.float32)) == "<numpy.ndarray shape=(3, 4) dtype=float32>"
    assert snapshot.safe_repr(np.zeros(2, dtype=np.int64)) == "<numpy.ndarray shape=(2,) dtype=int64>"


# --- cost: bounded time and memory, whatever a local holds ---------------------------------
def _fast_and_small(call: Callable[[], Any], seconds: float = 0.1, peak_bytes: int = 1 << 20) -> Any:
    started = time.perf_counter()
    out = call()
    took = time.perf_counter() - started
    tracemalloc.start()
    try:
        call()
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert took < seconds, f"took {took:.3f}s"
    assert peak < peak_bytes, f"peak {peak} bytes"
    return out


def test_a_200_mb_bytes_local_is_sliced_before_its_repr() -> None:
    big = b"\x00" * (200 * 1024 * 1024)
    out = _fast_and_small(lambda: snapshot.safe_repr(big))
    assert len(out) <= 2 * snapshot.REPR_CHARS
    shown, _, more = out.rpartition(" ... ")
    head = ast.literal_eval(shown)
    assert head and big.startswith(head) and more == f"{len(big) - len(head)} more bytes"


def test_a_huge_str_int_list_and_dict_cost_little() -> None:
    text = "é" * (50 * 1024 * 1024)
    out = _fast_and_small(lambda: snapshot.safe_repr(text))
    assert out.startswith("'éé") and out.endswith(f"... {len(text) - snapshot.REPR_CHARS} more chars")
    huge_int = 1 << 100_000
    assert _fast_and_small(lambda: snapshot.safe_repr(huge_int)) == "<int of 100001 bits>"
    many = list(range(5_000_000))
    assert _fast_and_small(lambda: snapshot.safe_repr(many)) == "[0, 1, 2, 3, 4, 5, 6, 7, ... 4999992 more]"
    table = dict.fromkeys(range(2_000_000), 0)
    assert _fast_and_small(lambda: snapshot.safe_repr(table)).endswith("... 1999992 more}")


def test_deeply_nested_lists_stop_at_the_depth_limit_with_markers() -> None:
    nested: list[Any] = []
    for _ in range(100_000):
        nested = [nested, 1, 2, 3, 4, 5, 6, 7, 8, 9]
    out = _fast_and_small(lambda: snapshot.safe_repr(nested))
    assert out.startswith("[[[[...], 1, 2") and "... 2 more]" in out
    assert len(out) <= 2 * snapshot.REPR_CHARS


# --- frames_of: what a frame's locals are read through ----------------------------------
def _blocked(target: Callable[[threading.Event], None]) -> tuple[threading.Thread, threading.Event]:
    go = threading.Event()
    thread = threading.Thread(target=target, args=(go,), daemon=True)
    thread.start()
    for _ in range(500):
        frame = sys._current_frames().get(thread.ident or 0)
        if frame is not None and frame.f_code.co_name == "wait":
            break
        time.sleep(0.01)
    return thread, go


def _frames_of(thread: threading.Thread) -> list[dict[str, Any]]:
    return snapshot.frames_of(sys._current_frames()[thread.ident or 0])


class Recording(dict):  # type: ignore[type-arg]
    """A class body's namespace (from __prepare__) whose reads record."""

    def items(self) -> Any:
        ran("namespace.items")
        return super().items()

    def __iter__(self) -> Any:
        ran("namespace.__iter__")
        return super().__iter__()

    def __len__(self) -> int:
        ran("namespace.__len__")
        return super().__len__()


class PrepareMeta(type):
    @classmethod
    def __prepare__(mcs, name: str, bases: Any, **kw: Any) -> Any:  # noqa: N804
        return Recording()


def test_a_class_body_with_its_own_namespace_mapping_is_not_read() -> None:
    def body(go: threading.Event) -> None:
        class Blocked(metaclass=PrepareMeta):  # noqa: F841
            x = 1
            go.wait(10)

    thread, go = _blocked(body)
    try:
        frames = _frames_of(thread)
    finally:
        go.set()
        thread.join(5)
    assert RAN == []
    blocked = next(f for f in frames if f["function"].endswith("Blocked"))
    assert blocked["locals"] == {}


def test_a_module_frame_with_a_hostile_global_key_is_not_stringified() -> None:
    key = Key()
    namespace: dict[Any, Any] = {key: 1, "plain": 2}
    code = compile("go.wait(10)", "<hostile-module>", "exec")

    def body(go: threading.Event) -> None:
        namespace["go"] = go
        exec(code, namespace)

    thread, go = _blocked(body)
    RAN.clear()
    try:
        frames = _frames_of(thread)
    finally:
        go.set()
        thread.join(5)
    assert RAN == []
    module = next(f for f in frames if f["file"] == "<hostile-module>")
    assert module["locals"][f"<{__name__}.Key>"] == "1" and module["locals"]["plain"] == "2"


# 28 locals of 10,000 non-ASCII characters each, plus depth and go: 40 frames of them are
# megabytes of JSON (\u escapes), the case that once lost a pause (issue 38, item 5).
_DEEP = ("def _deep(depth, go):\n"
         + "".join(f"    v{i:02d} = 'ü' * 10_000 + '{i}'\n" for i in range(28))
         + "    if depth:\n        _deep(depth - 1, go)\n    else:\n        go.wait(10)\n")
_deep_namespace: dict[str, Any] = {}
exec(compile(_DEEP, __file__, "exec"), _deep_namespace)
_deep: Callable[[int, threading.Event], None] = _deep_namespace["_deep"]


def test_a_snapshot_of_many_large_locals_stays_within_its_budget_with_markers() -> None:
    thread, go = _blocked(lambda ev: _deep(60, ev))
    try:
        started = time.perf_counter()
        frames = _frames_of(thread)
        took = time.perf_counter() - started
    finally:
        go.set()
        thread.join(5)
    size = len(json.dumps(frames).encode())
    assert size <= snapshot.SNAPSHOT_BYTES + 16 * 1024, size
    assert took < 0.5, f"took {took:.3f}s"
    assert len(frames) == snapshot.MAX_FRAMES + 1
    assert frames[-1]["function"].startswith("... ") and frames[-1]["function"].endswith(" more frames")
    marked = [f for f in frames if "..." in f["locals"]]
    assert marked and "snapshot budget" in marked[0]["locals"]["..."]
