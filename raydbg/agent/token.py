"""The agents' token: Ray's own when Ray token auth is on, else this cluster's raydbg token (in its GCS)."""

from __future__ import annotations

from raydbg import _ray_internals, auth, registry


def ray_auth_token() -> str | None:
    return _ray_internals.ray_auth_token()


def _raydbg_token() -> str:
    """This cluster's token: made by its first agent, fresh for every cluster (never a file
    an earlier cluster left: a token must not outlive the cluster it opens)."""
    raw = registry.get_bytes(registry.TOKEN)
    if not raw:
        raw = registry.put_if_absent(registry.TOKEN, auth.new_token().encode())
    return raw.decode()


def agent_token() -> str:
    """The token every agent of this cluster (head or not) presents and checks."""
    return ray_auth_token() or _raydbg_token()


def leave_for_local_clients(gateway: str, token: str) -> None:
    """On the head: the gateway's token where local clients look (auth.token_path), unless
    it is Ray's, which stays in Ray's own places (RAY_AUTH_TOKEN[_PATH], ~/.ray/auth_token)."""
    if token == ray_auth_token():
        auth.forget_cluster_token(gateway)  # a raydbg token an earlier cluster left here
    else:
        auth.save_cluster_token(gateway, token)
