"""Ray Train in activated workers: a pause-proof process-group timeout (pause groups: pause_group.py).

Why the timeout is raised at creation: gloo (and NCCL's watchdog) give each collective
the timeout the group had when the collective started; extending it later
(`_set_pg_timeout`) does not save peers already waiting in `all_reduce` (measured,
torch 2.13 gloo: extended 0.5 s into a 3 s collective, it still failed at 3.0 s). So
raydbg-activated Train workers create their group with max(user timeout,
RAYDBG_TRAIN_PG_TIMEOUT_S, default 24 h), and a real hang is reported by raydbg's hang
detector instead of ending the run (docs/hangs.md).

Nothing here imports torch or Ray Train: the patches are applied by a post-import hook
when Ray Train's torch backend is imported, so other workers pay nothing.
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import importlib.util
import logging
import os
import sys
from collections.abc import Callable, Sequence
from types import ModuleType
from typing import Any

log = logging.getLogger("raydbg.worker")

PG_TIMEOUT_ENV = "RAYDBG_TRAIN_PG_TIMEOUT_S"
DEFAULT_PG_TIMEOUT_S = 24 * 3600


# --- process-group timeout ----------------------------------------------------------
def pg_timeout_s(user_timeout_s: int, env: str | None = None) -> int:
    """The timeout the group is created with: never below the user's; env 0 keeps the user's."""
    raw = os.environ.get(PG_TIMEOUT_ENV, "") if env is None else env
    try:
        ours = int(float(raw)) if raw.strip() else DEFAULT_PG_TIMEOUT_S
    except ValueError:
        ours = DEFAULT_PG_TIMEOUT_S
    if ours <= 0:
        return user_timeout_s
    return max(user_timeout_s, ours)


def _after_pg_setup(kwargs: dict[str, Any]) -> None:
    log.info("raydbg: Train process group (rank %s) created with timeout %ss (RAYDBG_TRAIN_PG_TIMEOUT_S)",
             kwargs.get("world_rank"), kwargs.get("timeout_s"))
    from raydbg import progress_records as progress

    progress.beat(0, "train.setup", timed=False)  # a run stuck before its first report is still seen


def _report_beat() -> None:
    from raydbg import progress_records as progress

    progress.beat(None, "train.report", sync=True)


def _report_returned() -> None:
    from raydbg import progress_records as progress

    progress.resumed()


def _run_done() -> None:
    from raydbg import progress_records as progress

    progress.done()


# --- Flight Recorder ---------------------------------------------------------------------
FLIGHT_RECORDER_ENV = "RAYDBG_FLIGHT_RECORDER"  # 0: off; a number: entries kept per rank
DEFAULT_FLIGHT_RECORDER_ENTRIES = 2000


def enable_flight_recorder(env: dict[str, str] | Any = None) -> str | None:
    """Turn torch's Flight Recorder on for the Train group about to be made (gloo and NCCL):
    the ring of recent collectives raydbg reads to tell which collective each rank is in.
    Torch reads TORCH_FR_BUFFER_SIZE when the first group is created, so setting it before
    is enough. The user's own TORCH_FR_BUFFER_SIZE wins; RAYDBG_FLIGHT_RECORDER=0 leaves it off."""
    env = os.environ if env is None else env
    raw = str(env.get(FLIGHT_RECORDER_ENV, "")).strip().lower()
    if raw in ("0", "off", "false", "no") or env.get("TORCH_FR_BUFFER_SIZE"):
        return env.get("TORCH_FR_BUFFER_SIZE")
    size = int(raw) if raw.isdigit() and int(raw) > 0 else DEFAULT_FLIGHT_RECORDER_ENTRIES
    env["TORCH_FR_BUFFER_SIZE"] = str(size)
    return str(size)


def _patch_torch_config(module: ModuleType) -> None:
    from raydbg import _ray_internals

    enable_flight_recorder()
    _ray_internals.wrap_torch_pg_setup(module, pg_timeout_s, _after_pg_setup)
    _ray_internals.wrap_torch_shutdown(module, _run_done)


def _patch_data_iterator(module: ModuleType) -> None:
    """Ray Data's batch iterators: their waits are the step's wait for data (straggler events)."""
    from raydbg import _ray_internals
    from raydbg import progress_records as progress

    _ray_internals.wrap_iter_batches(module, progress.waited_for_data)


def _patch_torch_loader(module: ModuleType) -> None:
    """torch's DataLoader iterators: their waits are the step's wait for data (straggler events)."""
    from raydbg import _torch_internals
    from raydbg import progress_records as progress

    _torch_internals.wrap_loader_next(module, progress.waited_for_data)


def _patch_train_fn_utils(module: ModuleType) -> None:
    from raydbg import _ray_internals

    _ray_internals.wrap_train_report(module, _report_beat, _report_returned)


# --- post-import hooks ----------------------------------------------------------------
class _PostImport(importlib.abc.MetaPathFinder):
    """Runs a patch right after a named module is executed (and at once if already imported)."""

    def __init__(self) -> None:
        self.hooks: dict[str, Callable[[ModuleType], None]] = {}
        self._busy: set[str] = set()

    def find_spec(self, fullname: str, path: Sequence[str] | None = None,
                  target: ModuleType | None = None) -> importlib.machinery.ModuleSpec | None:
        hook = self.hooks.get(fullname)
        if hook is None or fullname in self._busy:
            return None
        self._busy.add(fullname)
        try:
            spec = importlib.util.find_spec(fullname)
        finally:
            self._busy.discard(fullname)
        loader = spec.loader if spec is not None else None
        if spec is None or loader is None or not hasattr(loader, "exec_module"):
            return spec
        exec_module = loader.exec_module

        def exec_and_patch(module: ModuleType) -> None:
            exec_module(module)
            _safely(hook, module)

        loader.exec_module = exec_and_patch  # type: ignore[method-assign]
        return spec


def _safely(hook: Callable[[ModuleType], None], module: ModuleType) -> None:
    try:
        hook(module)
    except Exception:
        log.exception("raydbg: could not patch %s", module.__name__)


_finder = _PostImport()


def when_imported(name: str, hook: Callable[[ModuleType], None]) -> None:
    if name in sys.modules:
        _safely(hook, sys.modules[name])
        return
    _finder.hooks[name] = hook
    if _finder not in sys.meta_path:
        sys.meta_path.insert(0, _finder)


def install() -> None:
    """In an activated worker: patch Ray Train's torch setup and report, and Ray Data's and torch's
    batch iterators, when they are imported."""
    from raydbg import _ray_internals, _torch_internals

    when_imported(_ray_internals.TORCH_CONFIG_MODULE, _patch_torch_config)
    when_imported(_ray_internals.TRAIN_FN_UTILS_MODULE, _patch_train_fn_utils)
    when_imported(_ray_internals.DATA_ITERATOR_MODULE, _patch_data_iterator)
    when_imported(_torch_internals.LOADER_MODULE, _patch_torch_loader)
