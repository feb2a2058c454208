"""Token discovery and constant-time checks for the gateway and the node relays."""

from __future__ import annotations

import hmac
import os
import secrets
from pathlib import Path

RAYDBG_TOKEN_PATH = Path.home() / ".raydbg" / "token"


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


def client_token(token_file: str | None = None) -> str:
    """The token a client presents: --token-file, RAYDBG_TOKEN, the head's file, then Ray's.

    The head's agent writes the token it checks to ~/.raydbg/token (0600), so on the head
    that file is right whether or not Ray token authentication is on.
    """
    if token_file:
        tok = read_token_file(Path(token_file).expanduser())
        if not tok:
            raise TokenError(f"token file {token_file} is missing or empty")
        return tok
    for tok in (os.environ.get("RAYDBG_TOKEN", "").strip() or None, read_token_file(RAYDBG_TOKEN_PATH), ray_token()):
        if tok:
            return tok
    raise TokenError(
        "no raydbg token found: set RAYDBG_TOKEN, RAY_AUTH_TOKEN or --token-file "
        f"(the head node keeps it in {RAYDBG_TOKEN_PATH})"
    )


def new_token() -> str:
    return secrets.token_urlsafe(32)


def write_private(path: Path, token: str) -> None:
    """Write a token file readable by its owner only (0600 from the first byte)."""
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write(token + "\n")
    os.chmod(path, 0o600)


def check(presented: str | None, expected: str) -> bool:
    if not presented:
        return False
    return hmac.compare_digest(presented.encode(), expected.encode())


def bearer(header: str | None) -> str | None:
    if not header or not header.startswith("Bearer "):
        return None
    return header[len("Bearer "):].strip()
