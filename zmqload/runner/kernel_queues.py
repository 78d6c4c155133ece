"""Kernel tcp queue bytes of this process's own connections (Linux), sampled as the run goes: how
much waited in the kernel rather than in libzmq. Two ioctls per connection, not /proc/net/tcp
(docs/ARCHITECTURE.md, "Recording stays off the measured path")."""

from __future__ import annotations

import fcntl
import os
import socket
import struct
import termios
from collections.abc import Iterable

SIOCINQ = termios.FIONREAD
SIOCOUTQ = termios.TIOCOUTQ
FD_DIR = "/proc/self/fd"
REFRESH_SAMPLES = 25  # look for new connections (reconnects) every this many samples
_INT = struct.Struct("i")


def _socket_link(fd: int) -> str | None:
    try:
        link = os.readlink(f"{FD_DIR}/{fd}")
    except OSError:
        return None
    return link if link.startswith("socket:[") else None


def _tcp_ports(fd: int) -> tuple[int, int] | None:
    """(local port, remote port) of a connected tcp socket, else None. Works on a duplicate
    so libzmq's descriptor is never owned or closed here."""
    try:
        with socket.socket(fileno=os.dup(fd)) as s:
            if s.family not in (socket.AF_INET, socket.AF_INET6) or s.type != socket.SOCK_STREAM:
                return None
            return s.getsockname()[1], s.getpeername()[1]
    except OSError:  # closed meanwhile, a listener (no peer), not a socket
        return None


class TcpQueues:
    """Sum of send/receive queue bytes over this process's tcp connections that touch `ports`."""

    def __init__(self, ports: Iterable[int | str]) -> None:
        self.ports = {int(p) for p in ports}
        self.available = os.path.isdir(FD_DIR)
        self._connections: dict[int, str] = {}  # fd -> "socket:[inode]" when it was found
        self._samples = 0

    def _find_connections(self) -> None:
        found = {}
        for name in os.listdir(FD_DIR):
            fd = int(name)
            link = _socket_link(fd)
            if link is None:
                continue
            ports = _tcp_ports(fd)
            if ports and (ports[0] in self.ports or ports[1] in self.ports):
                found[fd] = link
        self._connections = found

    def sample(self) -> tuple[int, int]:
        """(send queue bytes, receive queue bytes), or (-1, -1) where unknown."""
        if not self.available or not self.ports:
            return -1, -1
        if self._samples % REFRESH_SAMPLES == 0:
            self._find_connections()
        self._samples += 1
        sendq = recvq = 0
        for fd, link in list(self._connections.items()):
            # libzmq may have closed the connection and reused the number for something else
            if _socket_link(fd) != link:
                del self._connections[fd]
                continue
            try:
                sendq += _INT.unpack(fcntl.ioctl(fd, SIOCOUTQ, b"\0" * 4))[0]
                recvq += _INT.unpack(fcntl.ioctl(fd, SIOCINQ, b"\0" * 4))[0]
            except OSError:
                del self._connections[fd]
        return sendq, recvq


def ports_of(endpoints: Iterable[str] | None) -> list[int]:
    ports = []
    for endpoint in endpoints or ():
        if endpoint and endpoint.startswith("tcp://"):
            port = endpoint.rsplit(":", 1)[1]
            if port.isdigit():
                ports.append(int(port))
    return ports
