"""raydbg uses OpenTelemetry's public API only: no module under raydbg/ (except the Ray
adapter, raydbg/_ray_internals/, whose private names are Ray's) imports or references a
private OpenTelemetry name: an underscore name from an `opentelemetry` module, or a module
path with a component that starts with `_` (`_internal`, `_private`, ...)."""

from __future__ import annotations

import ast
import re
import sys
from pathlib import Path

import pytest

RAYDBG = Path(__file__).resolve().parent.parent / "raydbg"
_OTEL_PATH = re.compile(r"opentelemetry(\.\w+)*")


def _private(name: str) -> bool:
    return name.startswith("_") and not (name.startswith("__") and name.endswith("__"))


def _private_path(path: str) -> bool:
    return _OTEL_PATH.fullmatch(path) is not None and any(map(_private, path.split(".")))


def private_otel_uses(source: str) -> list[str]:
    """`line: what` for each private OpenTelemetry name `source` imports or references."""
    tree = ast.parse(source)
    found: list[str] = []
    bound: set[str] = set()  # names bound to OpenTelemetry modules or their objects
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if _OTEL_PATH.fullmatch(alias.name):
                    if _private_path(alias.name):
                        found.append(f"{node.lineno}: import {alias.name}")
                    bound.add(alias.asname or alias.name.split(".")[0])
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            if _OTEL_PATH.fullmatch(node.module):
                for alias in node.names:
                    if _private_path(node.module) or _private(alias.name):
                        found.append(f"{node.lineno}: from {node.module} import {alias.name}")
                    bound.add(alias.asname or alias.name)
        elif isinstance(node, ast.Constant) and isinstance(node.value, str):
            if _private_path(node.value):  # importlib.import_module("opentelemetry._x")
                found.append(f"{node.lineno}: {node.value!r}")
    for node in ast.walk(tree):
        # otel_module._name, otel_module.sub._name, getattr(otel_module, "_name")
        if isinstance(node, ast.Attribute) and _private(node.attr):
            root, attr = node.value, node.attr
        elif (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Name)
            and node.func.id == "getattr"
            and len(node.args) >= 2
            and isinstance(node.args[1], ast.Constant)
            and isinstance(node.args[1].value, str)
            and _private(node.args[1].value)
        ):
            root, attr = node.args[0], node.args[1].value
        else:
            continue
        while isinstance(root, ast.Attribute):
            root = root.value
        if isinstance(root, ast.Name) and root.id in bound:
            found.append(f"{node.lineno}: {root.id}...{attr}")
    return found


def scan(package: Path) -> dict[str, list[str]]:
    """Private OpenTelemetry uses per module of `package` (the Ray adapter left out)."""
    out = {}
    for path in sorted(package.rglob("*.py")):
        if package / "_ray_internals" in path.parents:
            continue
        uses = private_otel_uses(path.read_text(encoding="utf-8"))
        if uses:
            out[str(path.relative_to(package.parent))] = uses
    return out


def test_raydbg_uses_no_private_opentelemetry_names() -> None:
    assert len(list(RAYDBG.rglob("*.py"))) > 20  # the package really was scanned
    assert scan(RAYDBG) == {}


@pytest.mark.parametrize(
    "source",
    [
        "from opentelemetry.exporter.prometheus import _CustomCollector",
        "from opentelemetry.sdk.metrics import _Gauge as SyncGauge",
        "from opentelemetry.sdk.metrics._internal.instrument import Gauge",
        "import opentelemetry.sdk.metrics._internal",
        "import opentelemetry.context._contextvars_context as c",
        "from opentelemetry import context\nx = context._RUNTIME_CONTEXT",
        "from opentelemetry.trace import propagation as p\nk = p._SPAN_KEY",
        "import opentelemetry.trace\ndef f():\n    return opentelemetry.trace._TRACER_PROVIDER",
        "from opentelemetry import trace as t\nv = getattr(t, '_TRACER_PROVIDER')",
        "import importlib\nm = importlib.import_module('opentelemetry.sdk.metrics._internal')",
    ],
)
def test_the_check_finds_private_names(source: str) -> None:
    assert private_otel_uses(source), source


def test_the_check_passes_public_names() -> None:
    source = (
        "from opentelemetry import trace\n"
        "from opentelemetry.sdk.metrics.export import InMemoryMetricReader\n"
        "from opentelemetry.version import __version__\n"
        "import opentelemetry.sdk.trace as sdk\n"
        "t = trace.get_tracer('x')\n"
        "p = object()\n"
        "n = p._thread, sdk.TracerProvider, trace.__name__\n"
        "s = 'opentelemetry.sdk.metrics.export'\n"
    )
    assert private_otel_uses(source) == []


def test_ray_sees_no_span_kind_of_a_half_imported_opentelemetry(monkeypatch: pytest.MonkeyPatch) -> None:
    """Another thread importing opentelemetry.trace (the driver's agent start) leaves it in
    sys.modules half initialised for a moment; Ray's tracing code asks for SpanKind then."""
    import types

    from raydbg._ray_internals import tracing

    monkeypatch.setitem(sys.modules, "opentelemetry.trace", types.ModuleType("opentelemetry.trace"))
    assert tracing._TraceModule().SpanKind is tracing._TraceModule._NoKinds
    monkeypatch.undo()
    import opentelemetry.trace

    assert tracing._TraceModule().SpanKind is opentelemetry.trace.SpanKind


def test_no_context_is_current_in_a_half_imported_opentelemetry(monkeypatch: pytest.MonkeyPatch) -> None:
    import types

    from raydbg._ray_internals import otel_context

    monkeypatch.setitem(sys.modules, "opentelemetry.context", types.ModuleType("opentelemetry.context"))
    assert otel_context.in_context() is False  # before: AttributeError in every .remote()
