"""tests/e2e/trainer_pkg installed as a package: pip --target a `site-packages` directory of its own.

Its files then live where installed packages do (the shared venv is left alone); the
cluster's workers get the directory on PYTHONPATH, the driver on sys.path.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

PROJECT = Path(__file__).with_name("trainer_pkg")


def install(base: Path) -> Path:
    """Build and install the trainer under `base`; its `site-packages` directory."""
    source = base / "src"
    shutil.copytree(PROJECT, source)  # the build leaves build/ and *.egg-info beside its sources
    site = base / "site-packages"
    out = subprocess.run([sys.executable, "-m", "pip", "install", "--quiet", "--no-deps", "--no-build-isolation",
                          "--no-index", "--target", str(site), str(source)],
                         capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, f"pip could not install {PROJECT.name}: {out.stderr[-2000:]}"
    assert (site / "ddp_trainer" / "loop.py").exists(), sorted(p.name for p in site.iterdir())
    return site


def pythonpath(site: Path) -> str:
    return os.pathsep.join(p for p in (str(site), os.environ.get("PYTHONPATH", "")) if p)
