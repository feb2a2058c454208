"""The errors of raydbg's HTTP API, one map for both sides: each type is one HTTP status and a one-line message.

A route raises them and the agent's middleware (`middleware`, below) answers
`status {"error": "<line>"}`; a client turns a status and that body back into the same
type (`from_status`). The CLI prints the line and exits 1; the VS Code extension reads
the same `{"error"}` body (vscode-ext/src/gatewayClient.ts).

No aiohttp import here: the CLI reads these on its start-up path.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any, ClassVar

if TYPE_CHECKING:
    from aiohttp import web

MAX_LINE = 500  # characters of a message sent in a body (client-controlled text included)


class ApiError(Exception):
    """A problem a user can act on, said in one line; `status` is the HTTP status that carries it."""

    status: ClassVar[int] = 500

    def within(self, where: str) -> ApiError:
        """The same kind of error, its line prefixed by `where` (e.g. "session ID")."""
        return type(self)(f"{where}: {self}")


class BadRequest(ApiError, ValueError):
    status = 400


class Unauthorized(ApiError):
    status = 401


class Forbidden(ApiError):
    status = 403


class NotFound(ApiError):
    status = 404


class Conflict(ApiError):
    """Busy, or not in the state the request needs (yet)."""

    status = 409


class Unreachable(ApiError):
    """The peer could not be reached: the gateway (from a client), or a node agent (from the
    gateway, which also refuses to dial an agent Ray does not vouch for: raydbg.dial)."""

    status = 502


class Unavailable(ApiError):
    """Not now (too many clients, a Ray service not answering, agents still starting): try again."""

    status = 503


class Timeout(ApiError, TimeoutError):
    status = 504


class AgentsStarting(Unavailable):
    """raydbg's agents are starting on the cluster: the gateway is not listening yet."""


class NotJson(ApiError):
    """The peer answered with something that is not JSON (not a raydbg gateway or agent)."""

    status = 502


BY_STATUS: dict[int, type[ApiError]] = {c.status: c for c in (
    BadRequest, Unauthorized, Forbidden, NotFound, Conflict, Unreachable, Unavailable, Timeout)}


def from_status(status: int, message: str) -> ApiError:
    """The typed error for an HTTP error `status` (ApiError for one without a type of its own)."""
    kind = BY_STATUS.get(status)
    if kind is not None:
        return kind(message)
    err = ApiError(message)
    err.status = status  # type: ignore[misc]  # an instance's own status: what the peer said
    return err


def message_of(body: Any) -> str | None:
    """The one line of an error body `{"error": "..."}`, or None if `body` is not one."""
    if isinstance(body, dict) and isinstance(body.get("error"), str):
        return str(body["error"])
    return None


def body(exc: ApiError) -> dict[str, str]:
    """The JSON body that carries `exc`: one line, bounded, control characters escaped."""
    from raydbg import validate

    return {"error": validate.escape(str(exc) or type(exc).__name__, MAX_LINE)}


async def middleware(request: web.Request, handler: Callable[[web.Request], Awaitable[web.StreamResponse]]
                     ) -> web.StreamResponse:
    """The agent app's outermost middleware: an ApiError raised anywhere below (the token
    check included) becomes its status and one-line body; any other failure a one-line 500
    that names it (the traceback goes to the agent's log), not aiohttp's bare text. aiohttp's
    own HTTP answers (an unknown route, a wrong method) pass as they are."""
    from aiohttp import web

    try:
        return await handler(request)
    except ApiError as exc:
        return web.json_response(body(exc), status=exc.status)
    except web.HTTPException:
        raise
    except Exception as exc:
        import logging

        from raydbg import validate

        # Client-controlled text escaped: a path cannot forge log lines.
        logging.getLogger("raydbg.agent").exception("raydbg agent: %s %s failed", validate.escape(request.method, 16), validate.escape(request.path))
        failed = ApiError(f"raydbg agent error: {type(exc).__name__}: {exc} (the agent's log has the traceback)")
        return web.json_response(body(failed), status=500)


# A new-style aiohttp middleware (what `@web.middleware` marks), without importing aiohttp here.
middleware.__middleware_version__ = 1  # type: ignore[attr-defined]
