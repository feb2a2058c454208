"""Session ids from what a user typed: any unique prefix of a paused session's id, as git does."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from raydbg.client import Gateway, GatewayError


class IdError(ValueError):
    """No session, or more than one, matches; the message is one line."""


def resolve(typed: str, ids: Iterable[str]) -> str:
    """The one id in `ids` that equals `typed` or starts with it."""
    typed = typed.strip()
    if not typed:
        raise IdError("empty session id: `raydbg list` shows the paused sessions")
    known = sorted(set(ids))
    if typed in known:
        return typed
    matches = [sid for sid in known if sid.startswith(typed)]
    if len(matches) == 1:
        return matches[0]
    if not matches:
        raise IdError(f"no paused session matches {typed!r}: `raydbg list` shows the paused sessions")
    shown = ", ".join(matches[:5]) + (", ..." if len(matches) > 5 else "")
    raise IdError(f"session id prefix {typed!r} is ambiguous ({len(matches)} sessions: {shown}); "
                  f"type more characters")


def resolve_in(typed: str, sessions: Iterable[dict[str, Any]]) -> str:
    return resolve(typed, (str(rec.get("id")) for rec in sessions if rec.get("id")))


async def resolve_session(gateway: Gateway, typed: str) -> str:
    """Ask the gateway for the paused sessions and resolve `typed` among them (GatewayError if not one)."""
    try:
        return resolve_in(typed, await gateway.sessions())
    except IdError as exc:
        raise GatewayError(str(exc)) from None
