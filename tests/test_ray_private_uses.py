"""Ray's private modules are reached only through raydbg/_ray_internals/ (ast, no Ray started).

Flags, in every module under raydbg/ but the adapter's (the package raydbg/_ray_internals/):
an import of a private Ray module (`ray._private`, `ray._raylet`, `ray.train.v2._internal`,
...) or of a private name from a Ray module; `_x` read or set on a name bound by a Ray
import (`ray._private.worker`, `RemoteFunction._remote`, `rpdb._post_mortem`); a private
Ray module's dotted name as a string (what `importlib.import_module` would take).
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "raydbg"
ADAPTER = PACKAGE / "_ray_internals"  # a package: every module under it may use Ray's private names
_DOTTED = re.compile(r"ray(\.[A-Za-z_]\w*)+")


def _ray_module(name: str) -> bool:
    return name == "ray" or name.startswith("ray.")


def _private(name: str) -> bool:
    """`_x`, not `__x__` (dunders such as `ray.__version__` are public)."""
    return name.startswith("_") and not (name.startswith("__") and name.endswith("__"))


def _private_module(name: str) -> bool:
    return _ray_module(name) and any(_private(part) for part in name.split(".")[1:])


def private_uses(source: str, filename: str = "<source>") -> list[str]:
    """`line: what` for each private Ray use in `source`."""
    tree = ast.parse(source, filename)
    ray_names: set[str] = set()  # names bound by an import from Ray (module-wide: enough here)
    out: list[str] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if not _ray_module(alias.name):
                    continue
                if _private_module(alias.name):
                    out.append(f"{node.lineno}: import {alias.name}")
                ray_names.add(alias.asname or alias.name.split(".")[0])
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and _ray_module(node.module or ""):
            module = node.module or ""
            if _private_module(module):
                out.append(f"{node.lineno}: from {module} import ...")
            for alias in node.names:
                if _private(alias.name):
                    out.append(f"{node.lineno}: from {module} import {alias.name}")
                ray_names.add(alias.asname or alias.name)
    for node in ast.walk(tree):
        if (
            isinstance(node, ast.Attribute)
            and _private(node.attr)
            and isinstance(node.value, ast.Name)
            and node.value.id in ray_names
        ):
            out.append(f"{node.lineno}: {node.value.id}.{node.attr}")
        elif (
            isinstance(node, ast.Constant)
            and isinstance(node.value, str)
            and _DOTTED.fullmatch(node.value)
            and _private_module(node.value)
        ):
            out.append(f"{node.lineno}: {node.value!r}")
    return sorted(set(out), key=lambda s: int(s.split(":")[0]))


def test_no_module_but_the_adapter_uses_ray_private_modules() -> None:
    found = {
        str(path.relative_to(ROOT)): uses
        for path in sorted(PACKAGE.rglob("*.py"))
        if ADAPTER not in path.parents and (uses := private_uses(path.read_text(), str(path)))
    }
    assert found == {}, "move these behind raydbg/_ray_internals/: " + repr(found)


def test_the_adapter_names_the_ray_versions_it_was_written_for() -> None:
    from raydbg import _ray_internals, compat

    low, high = _ray_internals.RAY_VERSIONS_WRITTEN_FOR
    assert f"{low} to {high[:-1]}x" in (_ray_internals.__doc__ or "").splitlines()[0]
    assert compat.SUPPORTED_RAY == (low, high)
    for module in ADAPTER.glob("*.py"):  # each module says which Rays it was written for
        assert module.name == "__init__.py" or "Written for Ray 2.51.x to 2.60.x" in module.read_text(), module
    # The check sees what it must: the adapter itself is full of private uses.
    assert len([u for p in ADAPTER.rglob("*.py") for u in private_uses(p.read_text())]) >= 5


def test_the_adapter_finds_the_ray_internals_it_shortcuts() -> None:
    """The hook points whose absence would only make raydbg slower, not fail: their shape
    in the installed Ray (an upgrade that moves them shows here, not as lost throughput)."""
    from raydbg import _ray_internals

    untraced = _ray_internals.task_submit._untraced_remote()
    assert untraced is not None, "RemoteFunction._remote is no longer auto-init(tracing(_remote))"
    assert untraced.__code__.co_filename.endswith("ray/remote_function.py")


def test_a_call_without_arguments_skips_the_signature_check_ray_added_by_tracing(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """With Ray's tracing on, a function without parameters gets `_ray_trace_ctx`, which
    costs each of its calls Ray's argument check; raydbg skips it where there is nothing
    to check, and nowhere else."""
    import importlib
    import inspect

    from raydbg import _ray_internals

    sig = importlib.import_module("ray._common.signature")
    monkeypatch.setattr(sig, "flatten_args", sig.flatten_args)  # undone after the test
    _ray_internals.tracing._drop_context_nobody_takes()
    ctx = inspect.Parameter("_ray_trace_ctx", inspect.Parameter.KEYWORD_ONLY, default=None)
    with monkeypatch.context() as m:
        m.setattr(sig, "validate_args", lambda *a: pytest.fail("checked a call without arguments"))
        assert sig.flatten_args([ctx], (), {}) == []
        assert sig.flatten_args([ctx], (), {"_ray_trace_ctx": None}) == []
    with pytest.raises(TypeError):
        sig.flatten_args([ctx], (1,), {})  # an argument the function does not take
    x = inspect.Parameter("x", inspect.Parameter.POSITIONAL_OR_KEYWORD)
    with pytest.raises(TypeError):
        sig.flatten_args([x, ctx], (), {})  # a missing argument
    assert sig.flatten_args([x, ctx], (1,), {}) == [sig.DUMMY_TYPE, 1]


@pytest.mark.parametrize(
    "source",
    [
        "from ray._common import ray_option_utils",
        "from ray._raylet import GcsClient",
        "import ray._private.worker",
        "from ray.train.v2._internal.execution import train_fn_utils",
        "from ray import _private",
        "import ray\nmode = ray._private.worker.global_worker.mode",
        "import ray.util.rpdb as rpdb\nrpdb._post_mortem = print",
        "def f():\n    from ray.remote_function import RemoteFunction\n    return RemoteFunction._remote",
        "import importlib\nimportlib.import_module('ray._common.signature')",
    ],
)
def test_each_kind_of_private_use_is_found(source: str) -> None:
    assert private_uses(source)


@pytest.mark.parametrize(
    "source",
    [
        "import ray\nctx = ray.get_runtime_context()\nv = ray.__version__",
        "from ray.experimental import internal_kv\ninternal_kv.internal_kv_get_gcs_client()",
        "from raydbg import _ray_internals\n_ray_internals.worker_mode()",
        "import ray\nclass A:\n    def f(self):\n        return self._x",
        '"""Mentions `ray._private.worker` in prose."""',
    ],
)
def test_public_uses_pass(source: str) -> None:
    assert private_uses(source) == []
