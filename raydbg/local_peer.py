"""Who is at the other end of a local connection: the uid of a Unix or loopback TCP peer.

Every local listener raydbg opens lets only its own user in. A Unix socket says who
connected (SO_PEERCRED). A TCP socket does not, but Linux lists every socket of the
network namespace in /proc/net/tcp{,6} with its owner's uid (as identd reads it): the
peer's socket is the entry whose local address is our peer's and whose remote address is
ours. Only an ESTABLISHED entry counts: a closing or TIME_WAIT socket shows uid 0 and
proves nothing. Anything not found is "unknown", which callers refuse. No Ray import.
"""

from __future__ import annotations

import ipaddress
import socket
import struct
from collections.abc import Iterable
from pathlib import Path
from typing import Any

_CRED = struct.Struct("3i")  # struct ucred: pid, uid, gid
TCP_TABLES = (Path("/proc/net/tcp"), Path("/proc/net/tcp6"))
ESTABLISHED = "01"

Address = tuple[ipaddress.IPv4Address | ipaddress.IPv6Address, int]


def peer_credentials(sock: Any) -> tuple[int, int, int]:
    """(pid, uid, gid) of the process at the other end of a connected Unix socket (a
    socket.socket or asyncio's TransportSocket: anything with getsockopt)."""
    raw = sock.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, _CRED.size)
    pid, uid, gid = _CRED.unpack(raw)
    return pid, uid, gid


def _normal(ip: str) -> ipaddress.IPv4Address | ipaddress.IPv6Address:
    """An address as one comparable value (an IPv4-mapped IPv6 address is its IPv4)."""
    addr = ipaddress.ip_address(ip.split("%", 1)[0])
    if isinstance(addr, ipaddress.IPv6Address) and addr.ipv4_mapped is not None:
        return addr.ipv4_mapped
    return addr


def parse_table_address(text: str) -> Address:
    """`0100007F:1F90` (IPv4) or 32 hex digits and a port (IPv6), as the kernel prints them:
    the address in 32-bit words of host byte order, the port in hex."""
    hex_ip, hex_port = text.split(":")
    raw = b"".join(struct.pack("=I", int(hex_ip[i:i + 8], 16)) for i in range(0, len(hex_ip), 8))
    addr = ipaddress.ip_address(raw)
    if isinstance(addr, ipaddress.IPv6Address) and addr.ipv4_mapped is not None:
        return addr.ipv4_mapped, int(hex_port, 16)
    return addr, int(hex_port, 16)


def _sockaddr(name: tuple[str, int] | tuple[str, int, int, int]) -> Address:
    return _normal(name[0]), int(name[1])


def table_forms(address: Address) -> set[str]:
    """Every way the kernel may print `address` in its tables: the IPv4 form and, for an
    IPv4 address, its IPv4-mapped IPv6 form (a socket of an AF_INET6 client)."""
    ip, port = address
    forms: set[ipaddress.IPv4Address | ipaddress.IPv6Address] = {ip}
    if isinstance(ip, ipaddress.IPv4Address):
        forms.add(ipaddress.IPv6Address(b"\0" * 10 + b"\xff\xff" + ip.packed))
    out = set()
    for addr in forms:
        raw = addr.packed
        words = struct.unpack(f"={len(raw) // 4}I", raw)
        out.add("".join(f"{w:08X}" for w in words) + f":{port:04X}")
    return out


def owner_in_tables(peer: Address, local: Address, lines: Iterable[str]) -> int | None:
    """The uid of the ESTABLISHED socket whose own address is `peer` and remote is `local`.
    Compared as the kernel prints them (no parse per line: the tables hold every socket)."""
    peers, locals_ = table_forms(peer), table_forms(local)
    for line in lines:
        fields = line.split()
        if len(fields) >= 8 and fields[3] == ESTABLISHED and fields[1] in peers and fields[2] in locals_:
            return int(fields[7])
    return None


def tcp_peer_uid(sock: Any) -> int | None:
    """The uid that owns the other end of an accepted TCP connection, if it is on this host
    (and this network namespace); None when it cannot be found."""
    try:
        local, peer = _sockaddr(sock.getsockname()), _sockaddr(sock.getpeername())
    except (OSError, ValueError):
        return None
    for table in TCP_TABLES:
        try:
            lines = table.read_text().splitlines()[1:]
        except OSError:
            continue
        uid = owner_in_tables(peer, local, lines)
        if uid is not None:
            return uid
    return None


def peer_uid(sock: Any) -> int | None:
    """The uid of a connected peer, Unix or TCP; None when the kernel does not tell."""
    if sock.family == socket.AF_UNIX:
        return peer_credentials(sock)[1]
    if sock.family in (socket.AF_INET, socket.AF_INET6):
        return tcp_peer_uid(sock)
    return None
