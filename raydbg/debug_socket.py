"""The one door to a worker's debugger: a Unix socket, private to our uid, open only while paused.

debugpy has no authentication, so a TCP port (even on loopback) lets every local user
run code in the worker. Instead pydevd accepts on `<tmp>/raydbg-<uid>/debug/<pid>.sock`:
the directory is 0700, each accepted peer's uid is checked (SO_PEERCRED), and the
socket exists only while at least one thread of the worker is paused. The node agent
(same uid) dials it and checks the listener's pid and uid the same way.
No Ray or debugpy import here.
"""

from __future__ import annotations

import logging
import os
import socket
import threading
from pathlib import Path

from raydbg.local_peer import peer_credentials
from raydbg.private_dir import UnsafeDirError, check_private, runtime_dir

__all__ = ["Door", "UnsafeDirError", "expected_path", "peer_credentials", "socket_path"]

log = logging.getLogger("raydbg.worker")

def socket_dir() -> Path:
    return runtime_dir("debug")


def socket_path(pid: int) -> Path:
    return socket_dir() / f"{pid}.sock"


def expected_path(pid: int, recorded: str | None) -> Path:
    """Where the agent may dial worker `pid`: its socket in a private dir of ours, nowhere else."""
    path = Path(recorded) if recorded else socket_path(pid)
    if path.name != f"{pid}.sock":
        raise PermissionError(f"session socket {path} does not belong to pid {pid}")
    check_private(path.parent)
    return path


class Door:
    """A listening-socket stand-in for pydevd: `accept()` blocks while the door is shut.

    pydevd's connection thread calls listen() and accept() in a loop; only that thread
    touches the real socket, so opening and shutting from other threads is just an event.
    """

    POLL_S = 0.1  # how soon a shut door stops listening

    def __init__(self, path: Path) -> None:
        self.path = path
        self.refused = 0
        self._open = threading.Event()
        self._killed = False
        self._sock: socket.socket | None = None

    # --- what pydevd calls ------------------------------------------------------------
    def getsockname(self) -> tuple[str, int]:
        return (str(self.path), 0)

    def settimeout(self, timeout: float | None) -> None:
        pass

    def listen(self, backlog: int = 1) -> None:
        pass

    def accept(self) -> tuple[socket.socket, str]:
        while True:
            if not self._open.is_set():
                self._unlisten()
                self._open.wait()
            if self._killed:
                self._unlisten()
                raise OSError("raydbg debug door closed")
            listener = self._listening()
            try:
                conn, _ = listener.accept()
            except TimeoutError:
                continue
            conn.settimeout(None)
            _, uid, _ = peer_credentials(conn)
            if uid != os.getuid():
                self.refused += 1
                log.warning("raydbg: refused a debugger connection from uid %s on %s", uid, self.path)
                conn.close()
                continue
            return conn, str(self.path)

    def close(self) -> None:
        self._killed = True
        self._open.set()

    # --- what raydbg calls ------------------------------------------------------------
    def open(self) -> None:
        self._open.set()

    def shut(self) -> None:
        self._open.clear()

    @property
    def listening(self) -> bool:
        return self._sock is not None

    def _listening(self) -> socket.socket:
        if self._sock is None:
            try:
                self.path.unlink()  # a stale socket of an earlier process with this pid
            except FileNotFoundError:
                pass
            sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            sock.bind(str(self.path))
            os.chmod(self.path, 0o600)  # the 0700 directory is the fence; this is belt and braces
            sock.listen(1)
            sock.settimeout(self.POLL_S)
            self._sock = sock
        return self._sock

    def _unlisten(self) -> None:
        if self._sock is not None:
            self._sock.close()
            self._sock = None
            try:
                self.path.unlink()
            except FileNotFoundError:
                pass
