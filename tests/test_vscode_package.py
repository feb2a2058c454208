"""`npm run package` in vscode-ext/ builds a .vsix with the compiled extension, its README and ws."""

from __future__ import annotations

import json
import zipfile
from pathlib import Path

from vscode_support import EXT, npm


def test_vsix_contains_compiled_extension_and_readme(tmp_path: Path) -> None:
    vsix = tmp_path / "raydbg.vsix"
    npm("run", "package", "--", "-o", str(vsix))
    with zipfile.ZipFile(vsix) as z:
        names = set(z.namelist())
        manifest = json.loads(z.read("extension/package.json"))
    main = "extension/" + manifest["main"].removeprefix("./")
    assert main == "extension/out/src/extension.js"
    for entry in (main, "extension/readme.md", "extension/out/src/dapRelay.js",
                  "extension/node_modules/ws/index.js", "extension/media/ray.svg"):
        assert entry in names, f"{entry} missing from the .vsix: {sorted(names)}"
    # Sources, tests and dev tooling stay out.
    leaked = [n for n in names if n.startswith(("extension/src/", "extension/test/", "extension/out/test/"))
              or n.endswith((".ts", ".map")) or "/node_modules/typescript/" in n]
    assert not leaked, leaked
    assert manifest["contributes"]["views"]["raydbg"][0]["id"] == "raydbg.sessions"
    assert (EXT / "package-lock.json").exists()
