"""docs/architecture.md names only what the code has (no Ray, no imports of raydbg: files and ASTs).

Checked: every module path (`raydbg/x/y.py`, `x/y`, `raydbg.x.y`), every `module.function`
(`worker/session.pause`, `registry.record_event`, `agent/server.AgentServer.dap`, nested
handlers included) exists; the route table is exactly the aiohttp route tables; the layer
table is `[tool.importlinter]`'s; the event-kind table is exactly the kinds the code records;
every registry key the page lists is built from a key constant of the code, and every key
constant of a module that uses the registry is listed.
"""

from __future__ import annotations

import ast
import re
from functools import cache
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PKG = ROOT / "raydbg"
DOC = ROOT / "docs" / "architecture.md"

# Backticked text whose last part is one of these is a file name, not `module.name`.
FILE_SUFFIXES = {"md", "ts", "json", "toml", "pth", "txt", "yml", "yaml", "html", "sh", "png", "log"}
IDENT = r"[A-Za-z_][A-Za-z0-9_]*"
# `worker/session.pause`, `registry.record_event`, `agent/server.AgentServer.dap` (a trailing `()` allowed)
NAME_REF = re.compile(rf"^((?:{IDENT}/)*{IDENT})\.({IDENT}(?:\.{IDENT})*)(?:\(\))?$")
MODULE_PATH = re.compile(rf"^(?:raydbg/)?((?:{IDENT}/)*{IDENT})(\.py|/)?$")


def doc_text() -> str:
    return DOC.read_text()


def code_spans(text: str) -> list[str]:
    return re.findall(r"`([^`\n]+)`", text)


def section(text: str, heading: str) -> str:
    """The text under `heading` (a full heading line) up to the next heading."""
    start = text.index(heading + "\n") + len(heading) + 1
    stop = re.compile(r"^#+ ", re.M).search(text, start)
    return text[start:stop.start() if stop else len(text)]


def table_rows(text: str) -> list[list[str]]:
    rows = []
    for line in text.splitlines():
        if line.startswith("|") and not re.match(r"^\|[-| ]+\|$", line):
            rows.append([c.strip() for c in re.split(r"(?<!\\)\|", line.strip())[1:-1]])
    return rows[1:]  # without the header


# --- the code's side ----------------------------------------------------------------------
def module_file(path: str) -> Path | None:
    """`worker/session` -> raydbg/worker/session.py (or a package's __init__.py)."""
    for candidate in (PKG / f"{path}.py", PKG / path / "__init__.py"):
        if candidate.is_file():
            return candidate
    return None


@cache
def tree(file: Path) -> ast.Module:
    return ast.parse(file.read_text(), str(file))


def _defined(body: list[ast.stmt], name: str) -> ast.AST | None:
    """The def, class or assignment of `name` in `body` (an `if TYPE_CHECKING` or try block's too)."""
    for node in body:
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef) and node.name == name:
            return node
        if isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == name for t in node.targets):
            return node
        if isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name) and node.target.id == name:
            return node
        if isinstance(node, ast.ImportFrom | ast.Import) and any((a.asname or a.name) == name for a in node.names):
            return node  # re-exported (raydbg.runtime_env)
        for inner in ("body", "orelse", "finalbody"):
            if isinstance(node, ast.If | ast.Try) and (found := _defined(getattr(node, inner, []), name)):
                return found
    return None


def has_name(file: Path, dotted: str) -> bool:
    """`Class.method`, `function.nested_handler` or a module-level name, defined in `file`."""
    body: list[ast.stmt] = tree(file).body
    for part in dotted.split("."):
        node = _defined(body, part)
        if node is None:
            return False
        body = getattr(node, "body", [])
    return True


@cache
def top_level_names() -> set[str]:
    return {p.stem for p in PKG.glob("*.py")} | {p.name for p in PKG.iterdir() if (p / "__init__.py").is_file()}


@cache
def nested_stems() -> set[str]:
    return {p.stem for p in PKG.rglob("*.py") if p.parent != PKG and p.stem != "__init__"} - top_level_names()


def check_ref(ref: str) -> str | None:
    """None when `ref` (backticked text) names what exists or is not raydbg's; else why not.
    Event kinds and registry keys are checked by their own tests."""
    if ref in code_event_kinds() or ref.split("<")[0] in code_key_prefixes():
        return None
    if re.fullmatch(r"[\w/.-]+\.py", ref):  # a file: of the package, or of the repo (tests/cluster.py)
        return None if (ROOT / ref).is_file() or (PKG / ref).is_file() else f"{ref}: no such file"
    if ref.startswith("raydbg.") and re.fullmatch(rf"raydbg(?:\.{IDENT})+(?:\(\))?", ref):
        parts = ref.removesuffix("()").split(".")[1:]
        for i in range(len(parts), 0, -1):  # the longest prefix that is a module
            file = module_file("/".join(parts[:i]))
            if file is not None:
                rest = ".".join(parts[i:])
                return None if not rest or has_name(file, rest) else f"{ref}: no {rest} in {file.relative_to(ROOT)}"
        return None if has_name(PKG / "__init__.py", ".".join(parts)) else f"{ref}: no such module or name"
    m = NAME_REF.match(ref)
    if m and m.group(2).split(".")[-1] not in FILE_SUFFIXES:
        module, name = m.group(1).removeprefix("raydbg/"), m.group(2)
        file = module_file(module)
        if file is None:
            if "/" in module:
                return f"{ref}: no module raydbg/{module}.py"
            if module in nested_stems():
                return f"{ref}: {module} is not a top-level module; write its path (e.g. worker/{module}.{name})"
            return None  # not raydbg's (sys.breakpointhook, ray.train.report)
        return None if has_name(file, name) else f"{ref}: no {name} in {file.relative_to(ROOT)}"
    m = MODULE_PATH.match(ref)
    if m and ("/" in ref or ref.endswith(".py")):
        path = m.group(1)
        if m.group(2) == ".py":
            return None if (PKG / f"{path}.py").is_file() else f"{ref}: no file raydbg/{path}.py"
        return None if module_file(path) or (PKG / path).is_dir() else f"{ref}: no module or package raydbg/{path}"
    return None


@cache
def code_routes() -> set[tuple[str, str]]:
    """(METHOD, path) of every route in the aiohttp route tables (web.get(...), add_get(...))."""
    out = set()
    for file in PKG.rglob("*.py"):
        for node in ast.walk(tree(file)):
            if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.args):
                continue
            first = node.args[0]
            if not (isinstance(first, ast.Constant) and isinstance(first.value, str) and first.value.startswith("/")):
                continue
            verb = node.func.attr.removeprefix("add_")
            if verb in ("get", "post", "put", "delete", "patch") and (
                    node.func.attr.startswith("add_") or getattr(node.func.value, "id", None) == "web"):
                out.add((verb.upper(), first.value))
    return out


def _constant(node: ast.AST, env: dict[str, str]) -> str | None:
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value
    if isinstance(node, ast.Name):
        return env.get(node.id)
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add):
        left, right = _constant(node.left, env), _constant(node.right, env)
        return left + right if left is not None and right is not None else None
    return None


def string_constants(file: Path) -> dict[str, str]:
    """The module-level string constants of `file` (`A = "x/"`, `B = A + "y/"`)."""
    env: dict[str, str] = {}
    for node in tree(file).body:
        targets = node.targets if isinstance(node, ast.Assign) else [node.target] if isinstance(node, ast.AnnAssign) else []
        value = getattr(node, "value", None)
        for t in targets:
            if isinstance(t, ast.Name) and value is not None and (v := _constant(value, env)) is not None:
                env[t.id] = v
    return env


KV_KEY_SHAPE = re.compile(r"[a-z][a-z-]*(?:/[a-z-]+)*/")  # a key prefix: `session/`, `resume/group/`
EXACT_KEYS = {("registry", "GATEWAY"), ("registry", "TOKEN"), ("registry", "AGENTS_STARTING"),
              ("breakpoints/store", "VERSION")}


@cache
def code_key_prefixes() -> dict[str, str]:
    """Key constant value -> where: the `x/` constants of modules that use the registry, and the exact keys."""
    out = {}
    for file in PKG.rglob("*.py"):
        source = file.read_text()
        if "registry" not in source and "internal_kv" not in source:
            continue
        rel = str(file.relative_to(PKG).with_suffix(""))
        for name, value in string_constants(file).items():
            if name.isupper() and KV_KEY_SHAPE.fullmatch(value):
                out[value] = f"{rel}.{name}"
    for module, name in EXACT_KEYS:
        out[string_constants(module_file(module))[name]] = f"{module}.{name}"
    return out


@cache
def code_event_kinds() -> set[str]:
    """The first argument of every record_event call, and the `"kind"` of every event dict literal."""
    kinds = set()

    def strings(node: ast.AST) -> set[str]:
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            return {node.value}
        if isinstance(node, ast.IfExp):
            return strings(node.body) | strings(node.orelse)
        return set()

    for file in PKG.rglob("*.py"):
        for node in ast.walk(tree(file)):
            if isinstance(node, ast.Call) and getattr(node.func, "attr", getattr(node.func, "id", None)) == "record_event":
                if node.args:
                    kinds |= strings(node.args[0])
            if isinstance(node, ast.Dict):
                for k, v in zip(node.keys, node.values, strict=True):
                    if isinstance(k, ast.Constant) and k.value == "kind" and file.parent.name == "memory" and file.stem == "events":
                        kinds |= strings(v)
    return kinds


# --- the tests ----------------------------------------------------------------------------
def test_every_module_and_function_named_exists() -> None:
    problems = [why for ref in code_spans(doc_text()) if (why := check_ref(ref))]
    bare = [p for p in re.findall(r"(?<![`\w/])raydbg/[\w/]+\.py", doc_text()) if not (ROOT / p).is_file()]
    assert not problems + bare, "docs/architecture.md names what the code lacks:\n" + "\n".join(problems + bare)


def test_the_checker_refuses_a_wrong_name() -> None:
    assert check_ref("worker/session.pause") is None
    assert check_ref("agent/server.AgentServer.dap") is None
    assert check_ref("gang/routes.pause_routes.cluster_pause") is None  # a nested handler
    assert check_ref("raydbg.progress") is None
    assert check_ref("worker/session.no_such_function")
    assert check_ref("agent/server.AgentServer.no_such_method")
    assert check_ref("gang/collect.merged_progress")  # a module that was renamed
    assert check_ref("session.pause")  # ambiguous: not a top-level module
    assert check_ref("raydbg.gang.collect")
    assert check_ref("raydbg/gang/classes.py")
    assert check_ref("sys.breakpointhook") is None  # not raydbg's


def test_routes_are_the_route_tables() -> None:
    text = doc_text()
    table = {(row[0], row[1].strip("`")) for row in table_rows(section(text, "## Gateway HTTP API"))}
    assert table == code_routes(), (f"in the page only: {sorted(table - code_routes())}; "
                                    f"in the code only: {sorted(code_routes() - table)}")
    paths = {p for _, p in code_routes()}
    named = {p.rstrip(".,;:") for p in re.findall(r"/api/v1/[\w{}/.-]*", text)}
    assert named <= paths, f"routes the code does not serve: {sorted(named - paths)}"


def test_layer_table_is_the_import_linter_contract() -> None:
    # The layers contract's list, read as text (tomllib is 3.11+; the project supports 3.10).
    pyproject = (ROOT / "pyproject.toml").read_text()
    contract = pyproject[pyproject.index('type = "layers"'):]
    listed_layers = contract[contract.index("\nlayers = ["):]
    layers = re.findall(r'"([^"]+)"', listed_layers[:listed_layers.index("]")])
    rows = {int(row[0].split()[0]): row[1] for row in table_rows(section(doc_text(), "## Layers"))}
    assert sorted(rows) == list(range(len(layers)))
    for number, spec in zip(range(len(layers) - 1, -1, -1), layers, strict=True):
        wanted = {m.strip() for m in re.split(r"[:|]", spec)}
        listed = {span.removesuffix(".py").rstrip("/") for span in code_spans(rows[number])}
        assert listed == wanted, f"layer {number}: page only {sorted(listed - wanted)}, contract only {sorted(wanted - listed)}"


def test_event_kinds_are_the_code_s() -> None:
    table = {row[0].strip("`") for row in table_rows(section(doc_text(), "### Event kinds"))}
    assert code_event_kinds(), "no event kinds found in the code: the scan is broken"
    assert table == code_event_kinds(), (f"in the page only: {sorted(table - code_event_kinds())}; "
                                         f"in the code only: {sorted(code_event_kinds() - table)}")


def test_registry_keys_are_the_code_s() -> None:
    keys = [row[0].strip("`") for row in table_rows(section(doc_text(), "## Registry"))]
    prefixes = code_key_prefixes()
    for key in keys:
        literal = key.split("<")[0]
        assert literal in prefixes, f"registry key {key}: no key constant {literal!r} in the code"
    for value, where in prefixes.items():
        assert any(key.startswith(value) for key in keys), f"key {value!r} ({where}) is missing from the registry table"


@pytest.mark.parametrize("wrong", ["`gang/collect.cluster_stacks`", "`worker/session.pause_now`",
                                   "`/api/v1/no-such-route`"])
def test_a_wrong_name_on_the_page_fails(wrong: str) -> None:
    text = doc_text() + f"\nSee {wrong}.\n"
    problems = [why for ref in code_spans(text) if (why := check_ref(ref))]
    routes = {p for p in re.findall(r"/api/v1/[\w{}/.-]*", text)} - {p for _, p in code_routes()}
    assert problems or routes
