"""torch's private names are read only through raydbg/_torch_internals/ (ast, torch not imported).

Flags, in every module under raydbg/ but the adapter's: an import of a private torch module
(`torch._C`, `torch.distributed._x`, ...) or of a private name from a torch module; `_x` read
on a name bound by a torch import; a private torch module's dotted name as a string (what
`sys.modules.get` or `importlib.import_module` would take).
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "raydbg"
ADAPTER = PACKAGE / "_torch_internals"
_DOTTED = re.compile(r"torch(\.[A-Za-z_]\w*)+")


def _torch_module(name: str) -> bool:
    return name == "torch" or name.startswith("torch.")


def _private(name: str) -> bool:
    return name.startswith("_") and not (name.startswith("__") and name.endswith("__"))


def _private_module(name: str) -> bool:
    return _torch_module(name) and any(_private(part) for part in name.split(".")[1:])


def private_uses(source: str) -> list[str]:
    """`line: what` for each private torch use in `source`."""
    tree = ast.parse(source)
    torch_names: set[str] = set()
    out: list[str] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if _torch_module(alias.name):
                    if _private_module(alias.name):
                        out.append(f"{node.lineno}: import {alias.name}")
                    torch_names.add(alias.asname or alias.name.split(".")[0])
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and _torch_module(node.module or ""):
            if _private_module(node.module or ""):
                out.append(f"{node.lineno}: from {node.module} import ...")
            for alias in node.names:
                if _private(alias.name):
                    out.append(f"{node.lineno}: from {node.module} import {alias.name}")
                torch_names.add(alias.asname or alias.name)
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and _private(node.attr) and isinstance(node.value, ast.Name) \
                and node.value.id in torch_names:
            out.append(f"{node.lineno}: {node.value.id}.{node.attr}")
        elif isinstance(node, ast.Constant) and isinstance(node.value, str) and _DOTTED.fullmatch(node.value) \
                and _private_module(node.value):
            out.append(f"{node.lineno}: {node.value!r}")
    return sorted(set(out), key=lambda s: int(s.split(":")[0]))


def test_no_module_but_the_adapter_reads_torch_private_names() -> None:
    found = {str(p.relative_to(ROOT)): uses for p in sorted(PACKAGE.rglob("*.py"))
             if ADAPTER not in p.parents and (uses := private_uses(p.read_text()))}
    assert found == {}, "move these behind raydbg/_torch_internals/: " + repr(found)


def test_the_adapter_names_the_torch_versions_it_was_written_for() -> None:
    from raydbg import _torch_internals

    low, high = _torch_internals.TORCH_VERSIONS_WRITTEN_FOR
    assert f"(written for torch {high})" in (_torch_internals.__doc__ or "").splitlines()[0]
    for module in ADAPTER.glob("*.py"):
        assert module.name == "__init__.py" or f"Written for torch {high}." in module.read_text(), module
    # The check sees what it must: the adapter is where the private names are.
    assert len([u for p in ADAPTER.rglob("*.py") for u in private_uses(p.read_text())]) >= 2


@pytest.mark.parametrize("source", [
    "import torch._C._distributed_c10d",
    "from torch.distributed.distributed_c10d import _world",
    "from torch._C import _distributed_c10d",
    "import torch\nx = torch._C",
    "import sys\nc10d = sys.modules.get('torch._C._distributed_c10d')",
])
def test_the_check_flags(source: str) -> None:
    assert private_uses(source)


@pytest.mark.parametrize("source", [
    "import torch.distributed as dist\ndist.is_initialized()",
    "import sys\nd = sys.modules.get('torch.distributed')",
    "x = obj._private",  # not a torch name
])
def test_the_check_leaves_public_uses(source: str) -> None:
    assert private_uses(source) == []
