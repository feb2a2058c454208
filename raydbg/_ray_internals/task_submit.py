"""The one wrapper of Ray's task submission: retry budgets after each `.remote()`, and
calls outside any span sent past Ray's tracing wrapper.

Written for Ray 2.51.x to 2.60.x (each name below read in 2.51.2, 2.55.1 and 2.60.0). Relies on `ray.remote_function.RemoteFunction._remote` (and its
wrappers `auto_init_wrapper` and `_invocation_remote_span`), the remote function's
`_function_descriptor`, `_default_options` and `_function_name`,
`ray._private.worker.global_worker.connected`, and
`ray._common.ray_option_utils.task_options`.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Callable
from typing import Any

from raydbg._ray_internals.otel_context import in_context

# --- Task submission: retry budgets (raydbg/memory/budgets.py) and the tracing shortcut ---
# Every `f.remote()` and `f.options(...).remote()` of a normal task calls
# `RemoteFunction._remote(self, args, kwargs, serialized_runtime_env_info, **task_options)`
# (task_options: the call's options merged over the function's). On `self`:
# `_function_descriptor.function_id` (the id gate_task_functions sees in the worker),
# `_default_options` (the function's own options) and `_function_name` ("module.name").
# Ray's default `max_retries` is `ray._common.ray_option_utils.task_options`'s.
# `_remote` is `wrap_auto_init(_tracing_task_invocation(_remote))`: ray.init on first use,
# then, with the tracing flag on, a producer span and the injected context.

# What raydbg's one wrapper of `_remote` does: `after` (budgets), and `untraced` (the
# undecorated `_remote`, for calls made outside any span once the flag is on);
# `done`: the calls `after` is done with (see wrap_task_submit).
_submit: dict[str, Any] = {"after": None, "untraced": None, "done": {}}


def _wrap_remote() -> bool:
    """Wrap `RemoteFunction._remote` once; False when this Ray lacks it."""
    try:
        import ray._private.worker as worker_module
        from ray.remote_function import RemoteFunction
    except Exception:
        return False
    orig = getattr(RemoteFunction, "_remote", None)
    if orig is None:
        return False
    if getattr(orig, "_raydbg", False):
        return True
    unset = object()

    @functools.wraps(orig)
    def _remote(self: Any, *args: Any, **kwargs: Any) -> Any:
        untraced = _submit["untraced"]
        if untraced is not None and worker_module.global_worker.connected and not in_context():
            result = untraced(self, *args, **kwargs)  # what Ray's wrappers would end in
        else:
            result = orig(self, *args, **kwargs)
        after = _submit["after"]
        if after is None:
            return result
        # id(remote function) -> (it, its descriptor, the option `after` is done with). The
        # descriptor is new when the function is exported to another job or cluster.
        done = _submit["done"]
        seen = done.get(id(self))
        option = kwargs.get("max_retries", unset)
        if seen is not None and seen[1] is self._function_descriptor and seen[2] == option:
            return result
        try:
            descriptor = self._function_descriptor
            fid = descriptor.function_id.hex()
            if after(result, fid, self._default_options, kwargs, getattr(self, "_function_name", "")):
                if len(done) > 1000:  # remote functions made per call
                    done.clear()
                done[id(self)] = (self, descriptor, option)
        except Exception as e:
            logging.getLogger("raydbg").debug("raydbg: after-submit hook failed: %s", e)
        return result

    _remote._raydbg = True  # type: ignore[attr-defined]
    RemoteFunction._remote = _remote  # type: ignore[method-assign]
    return True


def _unwrap_remote_if_unused() -> None:
    from ray.remote_function import RemoteFunction

    cur = RemoteFunction._remote
    if getattr(cur, "_raydbg", False) and _submit["after"] is None and _submit["untraced"] is None:
        RemoteFunction._remote = cur.__wrapped__  # type: ignore[attr-defined,method-assign]


def wrap_task_submit(
    after: Callable[[Any, str, dict[str, Any], dict[str, Any], str], bool],
) -> bool:
    """Call `after(result, function id hex, function options, call options, function name)`
    once each normal task from this process is submitted (`result`: what `.remote()`
    returned); False when this Ray lacks the hook point. Whatever `after` raises is
    logged at debug level: never the reason a submission fails.

    `after` returns True when calls of that function with that `max_retries` option need
    it no more: later ones are then not passed to it (most calls of a function repeat its
    first, and this runs at every `.remote()`, where each step costs a busy driver 1-2 us)."""
    if not _wrap_remote():
        return False
    if _submit["after"] is not after:
        _submit.update(after=after, done={})
    return True


def unwrap_task_submit() -> None:
    """Undo wrap_task_submit (tests)."""
    _submit["after"] = None
    _unwrap_remote_if_unused()


def skip_tracing_outside_spans() -> None:
    """Send task calls made outside any span to `_remote` without Ray's auto-init and
    tracing wrappers, when it has exactly those (tracing.enable_task_tracing)."""
    untraced = _untraced_remote()
    if untraced is not None:
        _submit["untraced"] = untraced
        _wrap_remote()


def _untraced_remote() -> Callable[..., Any] | None:
    """`_remote` without Ray's auto-init and tracing wrappers, if it has exactly those."""
    from ray.remote_function import RemoteFunction

    fn: Any = RemoteFunction._remote
    if getattr(fn, "_raydbg", False):
        fn = fn.__wrapped__
    names: list[str] = []
    while fn is not None:
        names.append(getattr(getattr(fn, "__code__", None), "co_name", ""))
        if len(names) == 3:
            break
        fn = getattr(fn, "__wrapped__", None)
    if names != ["auto_init_wrapper", "_invocation_remote_span", "_remote"]:
        return None
    return fn  # type: ignore[no-any-return]


@functools.cache
def default_task_max_retries() -> int:
    """Ray's `max_retries` for a task that sets none (before RAY_TASK_MAX_RETRIES)."""
    from ray._common import ray_option_utils

    return int(ray_option_utils.task_options["max_retries"].default_value)
