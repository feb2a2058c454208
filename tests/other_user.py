"""Play another local user (uid 65534, `nobody`) in tests: a forked child drops to that uid.

These machines and CI run as root, so a test can be the other user of a shared node. The
child runs one function and sends back its one-line outcome; nothing of the parent's
(tokens, files) is passed to it beyond what the function closes over.
"""

from __future__ import annotations

import json
import os
import socket
from collections.abc import Callable

import pytest

OTHER_UID = 65534
can_be_other_user = pytest.mark.skipif(os.getuid() != 0, reason="playing another uid needs root (CI runs as root)")


def as_other_user(fn: Callable[[], str]) -> str:
    """`fn()` run in a child process as uid/gid 65534; its result, or `error <Type>: <text>`."""
    rd, wr = os.pipe()
    child = os.fork()
    if child == 0:  # pragma: no cover - runs in the child
        os.close(rd)
        try:
            os.setgroups([])
            os.setgid(OTHER_UID)
            os.setuid(OTHER_UID)
            outcome = fn()
        except BaseException as exc:  # noqa: BLE001 - everything goes back as text
            outcome = f"error {type(exc).__name__}: {exc}"
        os.write(wr, outcome.encode())
        os._exit(0)
    os.close(wr)
    os.waitpid(child, 0)
    with os.fdopen(rd) as f:
        return f.read()


def dap_requests(proof: str) -> bytes:
    """What an attacker sends a debug port: initialize, attach, configurationDone, and an
    evaluate that would create `proof` if it ran."""
    out = b""
    for seq, (command, args) in enumerate([
        ("initialize", {"adapterID": "x"}), ("attach", {"justMyCode": False}), ("configurationDone", {}),
        ("evaluate", {"expression": f"open({proof!r}, 'w').write('x')"}),
    ], start=1):
        body = json.dumps({"seq": seq, "type": "request", "command": command, "arguments": args}).encode()
        out += b"Content-Length: %d\r\n\r\n" % len(body) + body
    return out


def dap_attack(address: str | tuple[str, int], proof: str, timeout: float = 5.0) -> Callable[[], str]:
    """A function for `as_other_user`: connect to `address` (a Unix path or (host, port); a
    wildcard host is dialled on loopback), send DAP requests. "DAP answered" if a DAP
    response comes back, "answered, not DAP" for other bytes (an HTTP 400), "closed" if the
    door shut, "no answer" if it kept silent."""
    def attack() -> str:
        target: str | tuple[str, int] = address
        family = socket.AF_UNIX
        if not isinstance(address, str):
            host = {"0.0.0.0": "127.0.0.1", "::": "::1", "": "127.0.0.1"}.get(address[0], address[0])
            family = socket.AF_INET6 if ":" in host else socket.AF_INET
            target = (host, address[1])
        with socket.socket(family, socket.SOCK_STREAM) as s:
            s.settimeout(timeout)
            try:
                s.connect(target)
            except PermissionError:
                return "permission denied"
            try:  # refused at once, the door may be shut before or while we send
                s.sendall(dap_requests(proof))
                got = s.recv(65536)
            except (BrokenPipeError, ConnectionResetError):
                return "closed"
            except TimeoutError:
                return "no answer"
            if not got:
                return "closed"
            return "DAP answered" if b'"type"' in got and b"response" in got else "answered, not DAP"
    return attack
