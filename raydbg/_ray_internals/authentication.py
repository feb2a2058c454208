"""Ray's own token, when Ray's token authentication is on.

Written for Ray 2.60.0. Relies on `ray._private.authentication.authentication_utils.
is_token_auth_enabled` and `ray._raylet.AuthenticationTokenLoader`.
"""

from __future__ import annotations


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
