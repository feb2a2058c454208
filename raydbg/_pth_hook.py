"""Runs at interpreter start (raydbg_activate.pth) when RAY_DEBUG is on: no code change needed."""

import os

from raydbg import config
from raydbg.activation import enable_in_environ

if config.is_active():
    enable_in_environ(os.environ)  # type: ignore[arg-type]
