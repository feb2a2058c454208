"""`raydbg forward` lets only its own user in: TCP peers by the kernel's socket table, Unix
peers by SO_PEERCRED, the socket in a 0700 directory (no Ray: a gateway stand-in)."""

from __future__ import annotations

import asyncio
import os
import shutil
import socket
import stat
import tempfile
from pathlib import Path
from typing import Any

import pytest
from other_user import as_other_user, can_be_other_user, dap_attack

from raydbg import local_peer
from raydbg.client import GatewayError
from raydbg.forward import Forwarder, default_unix_path


class RelayGateway:
    """An attachable session; `open_dap` records each relay asked and stops there."""

    def __init__(self) -> None:
        self.relays = 0

    async def session(self, sid: str) -> dict[str, Any]:
        return {"id": sid, "attachable": True, "state": "waiting"}

    async def open_dap(self, http: Any, sid: str) -> Any:
        self.relays += 1
        raise GatewayError("test: stop here")


def test_the_kernel_table_addresses_parse() -> None:
    assert local_peer.parse_table_address("0100007F:1F90") == (local_peer._normal("127.0.0.1"), 8080)
    v6_loopback = "00000000000000000000000001000000:0050"
    assert local_peer.parse_table_address(v6_loopback) == (local_peer._normal("::1"), 80)
    mapped = "0000000000000000FFFF00000100007F:0050"  # ::ffff:127.0.0.1 is the IPv4 peer
    assert local_peer.parse_table_address(mapped) == (local_peer._normal("127.0.0.1"), 80)


def test_a_tcp_peer_is_found_by_its_four_tuple_and_a_closing_one_is_unknown() -> None:
    with socket.create_server(("127.0.0.1", 0)) as server:
        client = socket.create_connection(server.getsockname())
        conn, _ = server.accept()
        assert local_peer.tcp_peer_uid(conn) == os.getuid()
        client.close()  # FIN_WAIT / TIME_WAIT: shown as uid 0 by the kernel, so never believed
        assert local_peer.tcp_peer_uid(conn) is None
        conn.close()


async def _attack(fwd: Forwarder, target: str | tuple[str, int], proof: Path) -> str:
    loop = asyncio.get_running_loop()
    return await loop.run_in_executor(None, as_other_user, dap_attack(target, str(proof)))


@can_be_other_user
async def test_another_uid_on_the_tcp_port_is_refused_before_a_byte_is_relayed(tmp_path: Path) -> None:
    gateway = RelayGateway()
    fwd = Forwarder(gateway, "abc", 0)  # type: ignore[arg-type]
    port = await fwd.start()
    try:
        assert await _attack(fwd, ("127.0.0.1", port), tmp_path / "proof") == "closed"
        assert (fwd.refused, gateway.relays) == (1, 0)
        # The owner still gets through.
        _, writer = await asyncio.open_connection("127.0.0.1", port)
        for _ in range(100):
            if gateway.relays:
                break
            await asyncio.sleep(0.02)
        writer.close()
        assert (fwd.refused, gateway.relays) == (1, 1)
    finally:
        await fwd.close()


@can_be_other_user
async def test_the_unix_socket_is_private_and_checks_its_peer_too(tmp_path: Path) -> None:
    assert default_unix_path("abc").parent.name == "forward"  # `--unix` alone: a private dir of ours
    base = Path(tempfile.mkdtemp())  # outside pytest's 0700 tree, so the other user can walk to it
    os.chmod(base, 0o711)
    gateway = RelayGateway()
    path = base / "made" / "dap.sock"
    fwd = Forwarder(gateway, "abc", unix_path=path)  # type: ignore[arg-type]
    await fwd.start()
    try:
        assert stat.S_IMODE(os.lstat(path.parent).st_mode) == 0o700  # made 0700 for the socket
        assert await _attack(fwd, str(path), tmp_path / "proof") == "permission denied"
        # The directory is the fence; with it opened by mistake, the peer check still holds.
        os.chmod(path.parent, 0o711)
        os.chmod(path, 0o666)
        assert await _attack(fwd, str(path), tmp_path / "proof") == "closed"
        assert (fwd.refused, gateway.relays) == (1, 0)
    finally:
        await fwd.close()
        shutil.rmtree(base)
    assert not path.exists()


async def test_a_unix_path_in_a_directory_others_can_enter_is_refused(tmp_path: Path) -> None:
    shared = tmp_path / "shared"
    shared.mkdir(mode=0o755)
    os.chmod(shared, 0o755)
    fwd = Forwarder(RelayGateway(), "abc", unix_path=shared / "dap.sock")  # type: ignore[arg-type]
    with pytest.raises(GatewayError, match="has mode 755, open to other users"):
        await fwd.start()
    assert not (shared / "dap.sock").exists()
    planted = tmp_path / "mine"
    planted.mkdir(mode=0o700)
    (planted / "dap.sock").write_text("not a socket")
    fwd = Forwarder(RelayGateway(), "abc", unix_path=planted / "dap.sock")  # type: ignore[arg-type]
    with pytest.raises(GatewayError, match="exists and is not an old socket of yours"):
        await fwd.start()
    assert (planted / "dap.sock").read_text() == "not a socket"  # nothing lost
