"""Which stack frames are the user's and which are library internals; collective detection (pure).

One place decides what a stack report folds away: raydbg/user_code.py's rule (the standard
library, installed packages, raydbg itself, native frames and pseudo-files such as
`<string>` are not the user's, unless the job's own package lies there). A worker marks the
frames its roots make the user's (`"user": true`, raydbg/worker/user_roots.py); other
frames are judged by path and this process's RAYDBG_USER_CODE. What is left is the user's
code, which is what a class summary names.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable, Sequence
from typing import Any

from raydbg import user_code

Frame = dict[str, Any]  # {"function", "file", "line", "user"?}

# torch.distributed (and ray.util.collective) calls that block until peers join.
COLLECTIVES = frozenset({
    "all_reduce", "all_reduce_coalesced", "all_gather", "all_gather_into_tensor",
    "all_gather_object", "all_gather_coalesced", "broadcast", "broadcast_object_list",
    "barrier", "monitored_barrier", "reduce", "reduce_scatter", "reduce_scatter_tensor",
    "all_to_all", "all_to_all_single", "gather", "gather_object", "scatter",
    "scatter_object_list", "send", "recv", "send_object_list", "recv_object_list",
    "batch_isend_irecv", "wait", "allreduce", "allgather", "reducescatter",
    # functional collectives (FSDP2's all-gather and reduce-scatter go through these)
    "all_gather_single", "all_gather_tensor", "all_gather_into_tensor_coalesced",
    "reduce_scatter_tensor_coalesced", "wait_tensor", "reduce_scatter_single",
})
_COLLECTIVE_MODULES = ("torch/distributed/", "ray/util/collective/")
# Native frames of the communication libraries (py-spy --native).
_NATIVE_COLLECTIVE = re.compile(r"gloo::|nccl|c10d::|ProcessGroupGloo|ProcessGroupNCCL", re.I)


def is_native(frame: Frame) -> bool:
    return user_code.is_native_file(str(frame.get("file") or "")) or not frame.get("line")


def is_raydbg(frame: Frame) -> bool:
    return user_code.is_raydbg_file(str(frame.get("file") or ""))


def is_internal(frame: Frame) -> bool:
    """True for frames a user did not write (see the module docstring)."""
    if is_native(frame):
        return True
    file = str(frame.get("file") or "")
    if frame.get("user") is True:  # the worker's roots say so; the exclusions still hold
        return user_code.is_pseudo(file) or user_code.is_raydbg_file(file)
    return not user_code.is_user_file(file)


def short_name(function: str) -> str:
    """`ProcessGroup.all_reduce` -> `all_reduce` (py-spy names carry the class)."""
    return function.rsplit(".", 1)[-1]


def collective_frame(frames: Sequence[Frame]) -> Frame | None:
    """The outermost collective call in a stack (innermost first), if the thread is in one."""
    found = None
    for frame in frames:
        name = short_name(str(frame.get("function") or ""))
        file = str(frame.get("file") or "").replace(os.sep, "/")
        if name in COLLECTIVES and any(m in file for m in _COLLECTIVE_MODULES):
            found = frame
        elif is_native(frame) and _NATIVE_COLLECTIVE.search(str(frame.get("function") or "")):
            found = found or frame
    return found


def paused_at(frames: Sequence[Frame]) -> list[Frame]:
    """A paused thread's stack from the frame it stopped in, outward.

    Above that frame runs raydbg's pause path (its wait loop, debugpy, an import on first
    use), sampled wherever it happens to be: two threads paused on the same line differ
    there, so it is cut at the outermost raydbg frame reached through internal frames only.
    """
    cut = 0
    for i, frame in enumerate(frames):
        if not is_internal(frame):
            break
        if is_raydbg(frame):
            cut = i + 1
    return list(frames[cut:])


def user_frames(frames: Iterable[Frame]) -> list[Frame]:
    return [f for f in frames if not is_internal(f)]


def where(frame: Frame) -> str:
    return f"{os.path.basename(str(frame.get('file') or '?'))}:{frame.get('line')}"


def summary(frames: Sequence[Frame], paused: bool = False, depth: int = 1) -> str:
    """One line for a stack: `all_reduce <- train_step train_loop.py:104`.

    The innermost library call (folded frames' name) <- the innermost `depth` user frames.
    """
    users = user_frames(frames)[:depth]
    user_text = " <- ".join(f"{f.get('function')} {where(f)}" for f in users)
    if paused:
        top = users[0] if users else (frames[0] if frames else {})
        return f"paused at breakpoint  {where(top)} {top.get('function', '?')}"
    coll = collective_frame(frames)
    lib = coll if coll is not None else (frames[0] if frames and is_internal(frames[0]) else None)
    if lib is not None and users:
        return f"{short_name(str(lib.get('function')))} <- {user_text}"
    if users:
        return user_text
    if frames:
        return f"{short_name(str(frames[0].get('function')))} {where(frames[0])} (library)"
    return "(no Python frames)"


_IDLE_FUNCTIONS = frozenset({
    "wait", "acquire", "sleep", "select", "poll", "epoll", "get", "_wait_for_tstate_lock",
    "recv", "recv_into", "accept", "readline", "_worker", "run_forever", "_run_once",
    "main_loop",  # a Ray worker's main thread between tasks (Worker.main_loop, in C until the next)
    "_monitor_target",  # Ray Train's MonitoringThread: in C on its queue until the training thread ends
})


def looks_idle(frames: Sequence[Frame]) -> bool:
    """For sources that do not say (faulthandler): a thread waiting inside the stdlib."""
    if not frames:
        return True
    top = frames[0]
    return is_internal(top) and short_name(str(top.get("function"))) in _IDLE_FUNCTIONS
