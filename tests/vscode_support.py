"""Runs npm in vscode-ext/ for the VS Code extension tests (installs the locked deps once)."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

EXT = Path(__file__).resolve().parents[1] / "vscode-ext"


def npm(*args: str, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    """`npm ARGS` in vscode-ext/, after `npm ci` if node_modules is missing; fails loudly."""
    exe = shutil.which("npm")
    assert exe and shutil.which("node"), "node and npm are needed for the VS Code extension tests"
    if not (EXT / "node_modules" / ".package-lock.json").exists():
        _check(subprocess.run([exe, "ci", "--no-audit", "--no-fund"], cwd=EXT, capture_output=True,
                              text=True, timeout=600))
    return _check(subprocess.run([exe, *args], cwd=EXT, capture_output=True, text=True, timeout=timeout))


def _check(out: subprocess.CompletedProcess[str]) -> subprocess.CompletedProcess[str]:
    assert out.returncode == 0, f"{' '.join(out.args)} failed:\n{out.stdout[-3000:]}\n{out.stderr[-3000:]}"
    return out
