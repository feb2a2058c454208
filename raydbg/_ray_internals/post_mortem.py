"""Ray's task-error path routed to raydbg's post-mortem (RAY_DEBUG_POST_MORTEM=1).

Written for Ray 2.51.x to 2.60.x (each name below read in 2.51.2, 2.55.1 and 2.60.0). Relies on `ray.util.rpdb._post_mortem` and
`ray.util.debugpy._post_mortem`, which `execute_task` in _raylet.pyx reaches from its
`except` clause.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

# --- Post-mortem (raydbg/worker/hook.py) ----------------------------------------------
# With RAY_DEBUG_POST_MORTEM=1, a failed task's `except` in _raylet.pyx calls
# `ray.util.pdb._post_mortem()` (ray.util.rpdb), which with RAY_DEBUG=1 calls
# `ray.util.debugpy._post_mortem()`; replacing both sends either path to raydbg.
POST_MORTEM_MODULES = ("ray.util.rpdb", "ray.util.debugpy")


def route_post_mortem(post_mortem: Callable[[], None]) -> None:
    """Make Ray's task-error path call `post_mortem()` (inside its except clause)."""
    import importlib

    for name in POST_MORTEM_MODULES:
        module: Any = importlib.import_module(name)
        module._post_mortem = post_mortem
