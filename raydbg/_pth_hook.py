"""Runs at interpreter start (raydbg_activate.pth) when RAY_DEBUG is on, and in Ray workers."""

import os

from raydbg import config
from raydbg.activation import enable_in_environ, offer_node_hook

if config.is_active():
    enable_in_environ(os.environ)  # type: ignore[arg-type]
offer_node_hook()  # a Ray worker: raydbg at its first task if its job activated it
