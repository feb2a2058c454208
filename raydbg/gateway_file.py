"""Where the head agent leaves the gateway's address for local clients: path, write, read, remove.

The file is `<tmp>/raydbg-<uid>/sessions/<Ray session name>/gateway.json`, 0700 dirs of
ours (private_dir.session_dir); never in Ray's session dir, which every local user can
write. The agent writes it; the CLI, the TUI (and the VS Code extension, in
localGateway.ts) read it without connecting to Ray, so this module imports neither Ray
nor the agent.

The same JSON is also left by cluster, as the token is (`~/.raydbg/gateways/<gcs address>.json`,
0700 dirs): a client given RAY_ADDRESS finds its cluster's gateway there even when
/tmp/ray/session_latest is another cluster's (several clusters on one machine), without Ray.

Both carry the agent's identity (pid, start time, uid, boot id: proc_identity): a file
left by a stopped cluster names a process that is gone, even once its pid is reused, and
a client sends nothing to an address whose agent is not that very process.
"""

from __future__ import annotations

import json
import logging
import os
from pathlib import Path
from typing import Any

from raydbg.private_dir import (
    UnsafeDirError,
    address_file_name,
    check_private,
    create_new,
    home_dir,
    private_home_dir,
    read_own_text,
    session_dir,
    session_path,
)

# Only the agent writes and removes the file: its messages belong in the agent's log.
log = logging.getLogger("raydbg.agent")

NAME = "gateway.json"


def path(session: str | os.PathLike[str]) -> Path:
    """The gateway file of the Ray session `session` (its dir or name; created or not)."""
    return session_path(str(session), NAME)


def index_dir() -> Path:
    """`~/.raydbg/gateways` (HOME read at call time, as for the tokens)."""
    return home_dir("gateways")


def index_path(gcs_address: str) -> Path:
    """The gateway file of the cluster at `gcs_address` (host:port) in our own ~/.raydbg."""
    return index_dir() / (address_file_name(gcs_address) + ".json")


def _write_json(target: Path, gateway: dict[str, Any]) -> None:
    tmp = target.with_name(f".{target.name}.{os.getpid()}")
    tmp.unlink(missing_ok=True)
    with os.fdopen(create_new(tmp), "w") as f:
        f.write(json.dumps(gateway))
    os.replace(tmp, target)  # a reader never sees half a file


def write(session: str | None, gateway: dict[str, Any]) -> None:
    """Local clients on the head find the gateway here without connecting to Ray.
    Never raises: without the file a client asks Ray's record instead."""
    try:
        if session is None:
            return
        session_dir(session)  # creates our dirs, or refuses ones that are not private
        _write_json(path(session), gateway)
    except UnsafeDirError as e:
        log.warning("raydbg: no gateway file for local clients: %s", e)
    except Exception:
        log.debug("raydbg: no session dir for the gateway file", exc_info=True)
    write_index(gateway)


def write_index(gateway: dict[str, Any]) -> None:
    """The gateway's JSON in ~/.raydbg/gateways, by its cluster's GCS address. Never raises."""
    try:
        gcs = gateway.get("gcs_address")
        if isinstance(gcs, str) and gcs:
            private_home_dir("gateways")
            _write_json(index_path(gcs), gateway)
    except UnsafeDirError as e:
        log.warning("raydbg: no gateway file in ~/.raydbg for local clients: %s", e)
    except Exception:
        log.debug("raydbg: no gateway file in ~/.raydbg", exc_info=True)


def read_index(gcs_address: str) -> Any:
    """The JSON the head agent of the cluster at `gcs_address` left in ~/.raydbg (as `read`)."""
    target = index_path(gcs_address)
    check_private(target.parent)
    return json.loads(read_own_text(target))


def remove(session: str | None) -> None:
    """Remove the file when the head agent stops. Never raises."""
    try:
        if session is not None:
            session_dir(session)
            try:
                mine = read(session)
            except Exception:
                mine = None
            path(session).unlink(missing_ok=True)
            if isinstance(mine, dict) and isinstance(mine.get("gcs_address"), str) and mine["gcs_address"]:
                _remove_index(mine)
    except Exception:
        log.debug("raydbg: gateway file not removed", exc_info=True)


def _remove_index(mine: dict[str, Any]) -> None:
    """Remove the ~/.raydbg entry too, if it is still this agent's (a newer agent's stays)."""
    try:
        left = read_index(mine["gcs_address"])
    except Exception:
        return
    if isinstance(left, dict) and left.get("pid") == mine.get("pid") and left.get("address") == mine.get("address"):
        index_path(mine["gcs_address"]).unlink(missing_ok=True)


def read(session: str | os.PathLike[str]) -> Any:
    """The file's JSON, read only from our own private dirs (never created here).
    Raises FileNotFoundError, UnsafeDirError, ValueError or another OSError."""
    target = path(session)
    for d in (target.parent.parent.parent, target.parent.parent, target.parent):
        check_private(d)
    return json.loads(read_own_text(target))
