"""Token discovery and constant-time checks for the gateway and the node relays.

Each cluster has its own raydbg token (made by its first agent, kept in its GCS). The
head's agent leaves it for local clients in `~/.raydbg/tokens/<gateway host_port>`
(0600 in a 0700 dir), one file per gateway, so a client presents a cluster's token to
that cluster's gateway only. When Ray's token authentication is on the gateway checks
Ray's token, which stays where Ray keeps it: raydbg never copies it.
"""

from __future__ import annotations

import hmac
import os
import secrets
from pathlib import Path

from raydbg.private_dir import (
    address_file_name,
    create_new,
    home_dir,
    private_home_dir,
)


class TokenError(Exception):
    """No usable token was found."""


def read_token_file(path: Path) -> str | None:
    try:
        text = path.read_text().strip()
    except OSError:
        return None
    return text or None


def ray_token() -> str | None:
    """Ray's own token, when Ray token authentication is set up on this machine."""
    env = os.environ.get("RAY_AUTH_TOKEN", "").strip()
    if env:
        return env
    path_env = os.environ.get("RAY_AUTH_TOKEN_PATH")
    if path_env:
        return read_token_file(Path(path_env).expanduser())
    if os.environ.get("RAY_AUTH_MODE", "").lower() == "disabled":
        return None
    return read_token_file(Path.home() / ".ray" / "auth_token")


def tokens_dir() -> Path:
    """`~/.raydbg/tokens` (HOME read at call time: tests and sandboxes move it)."""
    return home_dir("tokens")


def token_path(gateway: str) -> Path:
    """The file that holds the raydbg token of the gateway at `gateway` (host:port)."""
    return tokens_dir() / address_file_name(gateway)


def save_cluster_token(gateway: str, token: str) -> Path:
    """Leave a cluster's raydbg token for local clients of its gateway (0600, no symlinks)."""
    path = token_path(gateway)
    private_home_dir("tokens")
    tmp = path.with_name(f".{path.name}.{os.getpid()}.{secrets.token_hex(4)}")
    with os.fdopen(create_new(tmp), "w") as f:
        f.write(token + "\n")
    os.replace(tmp, path)  # a reader sees the old token or the new one, never half
    return path


def forget_cluster_token(gateway: str) -> None:
    """No raydbg token for this gateway (it checks Ray's): remove one an earlier cluster left."""
    try:
        token_path(gateway).unlink()
    except OSError:
        pass


def token_file_for(gateway: str) -> Path:
    """A file holding the token for `gateway` (for tools that read one, e.g. Prometheus):
    the one the head left for it, else Ray's token file."""
    own = token_path(gateway)
    if own.exists():
        return own
    return Path(os.environ.get("RAY_AUTH_TOKEN_PATH") or Path.home() / ".ray" / "auth_token").expanduser()


def client_token(token_file: str | None = None, gateway: str | None = None) -> str:
    """The token a client presents to `gateway`: --token-file, RAYDBG_TOKEN, the token the
    head's agent left for that gateway, then Ray's own (when Ray token auth is on)."""
    if token_file:
        tok = read_token_file(Path(token_file).expanduser())
        if not tok:
            raise TokenError(f"token file {token_file} is missing or empty")
        return tok
    env = os.environ.get("RAYDBG_TOKEN", "").strip() or None
    own = read_token_file(token_path(gateway)) if gateway else None
    for tok in (env, own, ray_token()):
        if tok:
            return tok
    where = token_path(gateway) if gateway else tokens_dir()
    raise TokenError(
        "no raydbg token found: set RAYDBG_TOKEN, RAY_AUTH_TOKEN or --token-file "
        f"(the head node keeps it in {where})"
    )


def new_token() -> str:
    return secrets.token_urlsafe(32)


def write_private(path: Path, token: str) -> None:
    """Write a token file readable by its owner only (0600 from the first byte, no symlinks)."""
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.{secrets.token_hex(4)}")
    with os.fdopen(create_new(tmp), "w") as f:
        f.write(token + "\n")
    os.replace(tmp, path)


def check(presented: str | None, expected: str) -> bool:
    if not presented:
        return False
    return hmac.compare_digest(presented.encode(), expected.encode())


def bearer(header: str | None) -> str | None:
    if not header or not header.startswith("Bearer "):
        return None
    return header[len("Bearer "):].strip()
