"""Where the head agent leaves the gateway's address for local clients: path, write, read, remove.

The file is `<session dir>/raydbg-<uid>/gateway.json`: the session dir is open to every
local user, so it lives in our own 0700 dir inside it (see private_dir). The agent writes
it; the CLI, the TUI (and the VS Code extension, in localGateway.ts) read it without
connecting to Ray, so this module imports neither Ray nor the agent.
"""

from __future__ import annotations

import json
import logging
import os
from pathlib import Path
from typing import Any

from raydbg.private_dir import UnsafeDirError, check_private, create_new, open_private, private_dir

# Only the agent writes and removes the file: its messages belong in the agent's log.
log = logging.getLogger("raydbg.agent")

NAME = "gateway.json"


def path(session_dir: str | os.PathLike[str]) -> Path:
    """The gateway file of the Ray session at `session_dir` (created or not)."""
    return Path(session_dir) / f"raydbg-{os.getuid()}" / NAME


def write(session_dir: str | None, gateway: dict[str, Any]) -> None:
    """Local clients on the head find the gateway here without connecting to Ray.
    Never raises: without the file a client asks Ray's record instead."""
    try:
        if session_dir is None:
            return
        private_dir(session_dir)  # creates our dir, or refuses one that is not private
        target = path(session_dir)
        tmp = target.with_name(f".{NAME}.{os.getpid()}")
        tmp.unlink(missing_ok=True)
        with os.fdopen(create_new(tmp), "w") as f:
            f.write(json.dumps(gateway))
        os.replace(tmp, target)  # a reader never sees half a file
    except UnsafeDirError as e:
        log.warning("raydbg: no gateway file for local clients: %s", e)
    except Exception:
        log.debug("raydbg: no session dir for the gateway file", exc_info=True)


def remove(session_dir: str | None) -> None:
    """Remove the file when the head agent stops. Never raises."""
    try:
        if session_dir is not None:
            private_dir(session_dir)
            path(session_dir).unlink(missing_ok=True)
    except Exception:
        log.debug("raydbg: gateway file not removed", exc_info=True)


def read(session_dir: str | os.PathLike[str]) -> Any:
    """The file's JSON, read only from our own private dir (never created here).
    Raises FileNotFoundError, UnsafeDirError, ValueError or another OSError."""
    target = path(session_dir)
    check_private(target.parent)
    with os.fdopen(open_private(target, os.O_RDONLY)) as f:
        return json.loads(f.read())
