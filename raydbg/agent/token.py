"""The agents' token: Ray's own when Ray token auth is on, else raydbg's (0600, shared via GCS)."""

from __future__ import annotations

from raydbg import auth, registry


def ray_auth_token() -> str | None:
    try:
        from ray._private.authentication.authentication_utils import is_token_auth_enabled
        from ray._raylet import AuthenticationTokenLoader  # type: ignore[attr-defined]

        if is_token_auth_enabled():
            raw = AuthenticationTokenLoader.instance().get_raw_token()
            return raw.decode() if isinstance(raw, bytes) else str(raw)
    except Exception:
        return None
    return None


def _raydbg_token() -> str:
    raw = registry.get_bytes(registry.TOKEN)
    if not raw:
        # Reuse this machine's token so clients keep working across clusters.
        candidate = auth.read_token_file(auth.RAYDBG_TOKEN_PATH) or auth.new_token()
        raw = registry.put_if_absent(registry.TOKEN, candidate.encode())
    return raw.decode()


def agent_token(is_head: bool) -> str:
    tok = ray_auth_token() or _raydbg_token()
    # Local clients on the head read the token the gateway checks from this 0600 file.
    if is_head and auth.read_token_file(auth.RAYDBG_TOKEN_PATH) != tok:
        auth.write_private(auth.RAYDBG_TOKEN_PATH, tok)
    return tok
