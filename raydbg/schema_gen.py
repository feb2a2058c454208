"""Writes the generated copies of raydbg/schema.py: the docs' field tables and the VS Code extension's types.

    python -m raydbg.schema_gen            # rewrite docs/records.md, vscode-ext/src/records.generated.ts
    python -m raydbg.schema_gen --check    # exit 1, naming the stale file, when either differs (make lint)

Both come from msgspec's JSON Schema of the structs, so a field's type, default and
description have one home. A field marked `x-internal` is left out of the TypeScript (the
gateway never sends it).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

import msgspec

from raydbg import schema

DOCS = Path("docs/records.md")
TYPESCRIPT = Path("vscode-ext/src/records.generated.ts")
COMMAND = "python -m raydbg.schema_gen"


def _components() -> dict[str, Any]:
    _, defs = msgspec.json.schema_components(schema.DOCUMENTED, ref_template="#/$defs/{name}")
    return defs


def _ref_name(ref: str) -> str:
    return ref.rsplit("/", 1)[-1]


# --- the docs ----------------------------------------------------------------------------------
def _doc_type(s: dict[str, Any]) -> str:
    if "$ref" in s:
        name = _ref_name(s["$ref"])
        return f"[{name}](#{name.lower()})"
    if "anyOf" in s:
        return " or ".join(_doc_type(x) for x in s["anyOf"])
    if "enum" in s:
        return "one of " + ", ".join(f"`{v}`" for v in s["enum"])
    kind = s.get("type")
    if kind == "string":
        if "pattern" in s:
            return "str (an id: `[A-Za-z0-9_.-]`, 1 to 128)"
        return f"str (at most {s['maxLength']} chars)" if "maxLength" in s else "str"
    if kind == "integer":
        lo, hi = s.get("minimum"), s.get("maximum")
        bounds = f" ({lo} to {hi})" if lo is not None and hi is not None else (f" (≥ {lo})" if lo is not None else "")
        return "int" + bounds
    if kind == "array":
        return "list of " + _doc_type(s.get("items", {}))
    if kind == "object":
        extra = s.get("additionalProperties")
        return f"{{str: {_doc_type(extra)}}}" if isinstance(extra, dict) and extra else "object"
    return {"number": "float", "boolean": "bool", "null": "null"}.get(kind or "", "any")


def _doc_default(name: str, s: dict[str, Any], required: list[str]) -> str:
    if name in required:
        return "required"
    if "default" not in s:
        return "absent"
    return f"`{json.dumps(s['default'])}`"


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def docs() -> str:
    defs = _components()
    out = [
        "# Records",
        "",
        f"<!-- Generated from raydbg/schema.py by `{COMMAND}`; edit there, not here. -->",
        "",
        "Every record raydbg writes to a wire or to storage, one table each. Readers refuse a",
        "record whose fields have the wrong type or size (one warning, counted in",
        "`malformed_records`); fields a table does not name are kept as they are (a newer",
        "writer's), and a missing optional field reads as its default. `absent`: the field is",
        "written only when it has a value. Field names are stable: `raydbg list --json` and",
        "the others print these.",
        "",
    ]
    for cls in schema.DOCUMENTED:
        s = defs[cls.__name__]
        out += [f"## {cls.__name__}", "", _cell(" ".join((cls.__doc__ or "").split())), ""]
        out += ["| field | type | default | meaning |", "|---|---|---|---|"]
        required = s.get("required", [])
        for name, prop in s["properties"].items():
            meaning = prop.get("description", "")
            if prop.get("x-internal"):
                meaning += " (internal: never sent to clients)"
            out.append(f"| `{name}` | {_cell(_doc_type(prop))} | {_doc_default(name, prop, required)} | "
                       f"{_cell(meaning)} |")
        out.append("")
    return "\n".join(out)


# --- the extension's types ---------------------------------------------------------------------
def _ts_type(s: dict[str, Any]) -> str:
    if "$ref" in s:
        return _ref_name(s["$ref"])
    if "anyOf" in s:
        return " | ".join(_ts_type(x) for x in s["anyOf"])
    if "enum" in s:
        return " | ".join(json.dumps(v) for v in s["enum"])
    kind = s.get("type")
    if kind == "array":
        item = _ts_type(s.get("items", {}))
        return f"({item})[]" if " | " in item else f"{item}[]"
    if kind == "object":
        extra = s.get("additionalProperties")
        return f"Record<string, {_ts_type(extra)}>" if isinstance(extra, dict) and extra else "Record<string, unknown>"
    return {"string": "string", "integer": "number", "number": "number", "boolean": "boolean",
            "null": "null"}.get(kind or "", "unknown")


def typescript() -> str:
    defs = _components()
    out = [
        f"// Generated from raydbg/schema.py by `{COMMAND}`; edit there, not here.",
        "// The records as the gateway sends them (fields with a default are always present;",
        "// `?`: written only when set). records.ts parses what arrives into these, defensively.",
        "",
    ]
    for cls in schema.DOCUMENTED:
        s = defs[cls.__name__]
        out += ["/** " + " ".join((cls.__doc__ or "").split()).replace("*/", "* /") + " */",
                f"export interface {cls.__name__} {{"]
        required = s.get("required", [])
        for name, prop in s["properties"].items():
            if prop.get("x-internal"):
                continue
            if prop.get("description"):
                out.append(f"  /** {prop['description'].replace('*/', '* /')} */")
            optional = "" if name in required or "default" in prop else "?"
            out.append(f"  {name}{optional}: {_ts_type(prop)};")
        out += ["}", ""]
    return "\n".join(out)


# --- writing and checking -----------------------------------------------------------------------
def outputs() -> dict[Path, str]:
    return {DOCS: docs(), TYPESCRIPT: typescript()}


def stale(root: Path) -> list[Path]:
    """The generated files under `root` that differ from what the schema gives now."""
    out = []
    for rel, text in outputs().items():
        path = root / rel
        if not path.is_file() or path.read_text() != text:
            out.append(rel)
    return out


def write(root: Path) -> list[Path]:
    """Rewrite the generated files under `root`; those that changed."""
    changed = stale(root)
    for rel, text in outputs().items():
        if rel in changed:
            (root / rel).write_text(text)
    return changed


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog=COMMAND, description=__doc__.splitlines()[0])
    p.add_argument("--check", action="store_true", help="fail when a generated file is stale")
    p.add_argument("--root", type=Path, default=Path(__file__).resolve().parents[1],
                   help="the repository (default: the one this raydbg is in)")
    args = p.parse_args(argv)
    if args.check:
        old = stale(args.root)
        for rel in old:
            print(f"{rel} is stale: run `{COMMAND}` and commit it", file=sys.stderr)
        return 1 if old else 0
    for rel in write(args.root):
        print(f"wrote {rel}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
