"""The package's shape: no private name used across packages (import-linter checks the layers)."""

from __future__ import annotations

import ast
from pathlib import Path

import raydbg

ROOT = Path(raydbg.__file__).parent


def _module(path: Path) -> str:
    parts = list(path.relative_to(ROOT.parent).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _package(module: str, path: Path) -> str:
    return module if path.name == "__init__.py" else module.rpartition(".")[0]


def _is_module(name: str) -> bool:
    relative = Path(*name.split(".")[1:])
    return (ROOT / relative).is_dir() or (ROOT / relative).with_suffix(".py").is_file()


def private_uses(path: Path, module: str | None = None) -> list[str]:
    """`from raydbg.X import _name` and `X._name` of a raydbg module X from another package
    (`module`: the name `path` has in the package, found from its place by default)."""
    module = module or _module(path)
    package = _package(module, path)

    def outside(target: str) -> bool:
        return not (target == package or target.startswith(package + "."))

    tree = ast.parse(path.read_text())
    found: list[str] = []
    aliases: dict[str, str] = {}  # local name -> raydbg module it is bound to
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.level == 0 and (node.module or "").startswith("raydbg"):
            for alias in node.names:
                full = f"{node.module}.{alias.name}"
                if _is_module(full):
                    aliases[alias.asname or alias.name] = full
                elif alias.name.startswith("_") and not alias.name.startswith("__") and outside(str(node.module)):
                    found.append(f"{path.name}:{node.lineno} imports {full}")
        elif isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.startswith("raydbg") and alias.asname:
                    aliases[alias.asname] = alias.name
    for node in ast.walk(tree):
        if (isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.attr.startswith("_")
                and not node.attr.startswith("__") and node.value.id in aliases):
            target = aliases[node.value.id]
            if outside(target) and not _is_module(f"{target}.{node.attr}"):
                found.append(f"{path.name}:{node.lineno} uses {target}.{node.attr}")
    return found


def test_no_private_name_is_used_across_packages() -> None:
    # The Ray adapter's package is named private on purpose (Ray's internals); its module is
    # imported, its names are public.
    found = [use for path in sorted(ROOT.rglob("*.py")) for use in private_uses(path)]
    assert found == []


def test_the_check_sees_a_private_import_and_a_private_attribute(tmp_path: Path) -> None:
    probe = tmp_path / "probe.py"
    probe.write_text("from raydbg.worker.debugpy_control import _paused_threads\n"
                     "from raydbg.worker import debugpy_control\n"
                     "debugpy_control._lock\n"
                     "from raydbg.gang import pause\n"
                     "pause._private\n")
    assert private_uses(probe, "raydbg.gang.probe") == [
        "probe.py:1 imports raydbg.worker.debugpy_control._paused_threads",
        "probe.py:3 uses raydbg.worker.debugpy_control._lock",
    ]
    # Inside its own package a private name is the package's business.
    assert private_uses(probe, "raydbg.worker.probe") == ["probe.py:5 uses raydbg.gang.pause._private"]
