"""Where the embedded telemetry exporters write: the connected cluster's session folder, else a fallback."""

from __future__ import annotations

from raydbg import _ray_internals, private_dir, ray_context


def session_dir() -> str | None:
    """The Ray session directory of the connected cluster, or None."""
    return _ray_internals.session_dir() if ray_context.connected_ray() is not None else None


def session_telemetry_dir(override: str | None = None) -> str | None:
    """`override`, else `<tmp>/raydbg-<uid>/sessions/<session>/telemetry` for the connected
    cluster's session (not in Ray's session dir: every local user can write there), else None."""
    if override:
        return override
    session = session_dir()
    return str(private_dir.session_path(session, "telemetry")) if session else None


def fallback_dir() -> str:
    # Not <tmp>/raydbg/...: a `raydbg` folder in the cwd would shadow the package.
    return str(private_dir.runtime_root() / "telemetry")


def prepare_dir(directory: str) -> None:
    """Create `directory` for writing; one of ours under `<tmp>/raydbg-<uid>` is made 0700
    level by level and checked (UnsafeDirError, an OSError, if another user made one first).
    A directory the user named is theirs to secure."""
    private_dir.make_dirs(directory)


def telemetry_dir(override: str | None = None) -> str:
    """Where the embedded JSON lines go: override, else the session's, else a temp dir."""
    return session_telemetry_dir(override) or fallback_dir()
