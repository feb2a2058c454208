"""Ray's own token, when Ray's token authentication is on.

Written for Ray 2.51.x to 2.60.x. Relies on `ray._private.authentication.
authentication_utils.is_token_auth_enabled` and `ray._raylet.AuthenticationTokenLoader`,
both from Ray 2.52 on: Ray 2.51 has no token authentication (only raydbg's own token
applies there), which `token_auth_in_ray()` detects by the module being there.
"""

from __future__ import annotations

AUTH_MODULE = "ray._private.authentication.authentication_utils"


def token_auth_in_ray() -> bool:
    """Whether this Ray has token authentication at all (Ray 2.52+)."""
    import importlib.util

    try:
        return importlib.util.find_spec(AUTH_MODULE) is not None
    except ImportError:  # its parent package missing
        return False


def ray_auth_token() -> str | None:
    """Ray's own token when Ray token authentication is on (its loader), else None."""
    try:
        from ray._private.authentication.authentication_utils import is_token_auth_enabled
        from ray._raylet import AuthenticationTokenLoader  # type: ignore[attr-defined]

        if is_token_auth_enabled():
            raw = AuthenticationTokenLoader.instance().get_raw_token()
            return raw.decode() if isinstance(raw, bytes) else str(raw)
    except Exception:
        return None
    return None
