"""Kernel socket queue bytes of this process's tcp connections (Linux /proc).

A PUB's HWM seems "not to drop" when the kernel's send and receive buffers hold the
messages instead: sampling tx_queue / rx_queue of the run's own connections shows how
much was waiting in the kernel versus in libzmq's queues.
"""
from __future__ import annotations

import os

PROC_TABLES = ("/proc/net/tcp", "/proc/net/tcp6")
INODE_REFRESH_SAMPLES = 25


class TcpQueues:
    """Sum of tx/rx queue bytes over this process's tcp sockets that touch `ports`."""

    def __init__(self, ports):
        self.ports = {int(p) for p in ports}
        self.available = os.path.exists(PROC_TABLES[0]) and os.path.isdir("/proc/self/fd")
        self._inodes: set[str] = set()
        self._samples = 0

    def _own_socket_inodes(self) -> set[str]:
        inodes = set()
        for fd in os.listdir("/proc/self/fd"):
            try:
                target = os.readlink(f"/proc/self/fd/{fd}")
            except OSError:
                continue
            if target.startswith("socket:["):
                inodes.add(target[8:-1])
        return inodes

    def sample(self) -> tuple[int, int]:
        """(send queue bytes, receive queue bytes), or (-1, -1) where unknown."""
        if not self.available or not self.ports:
            return -1, -1
        if self._samples % INODE_REFRESH_SAMPLES == 0:
            self._inodes = self._own_socket_inodes()
        self._samples += 1
        sendq = recvq = 0
        for table in PROC_TABLES:
            try:
                with open(table) as f:
                    next(f)
                    for line in f:
                        fields = line.split()
                        if fields[9] not in self._inodes:
                            continue
                        local_port = int(fields[1].rsplit(":", 1)[1], 16)
                        remote_port = int(fields[2].rsplit(":", 1)[1], 16)
                        if local_port in self.ports or remote_port in self.ports:
                            tx, rx = fields[4].split(":")
                            sendq += int(tx, 16)
                            recvq += int(rx, 16)
            except (OSError, StopIteration, IndexError, ValueError):
                continue
        return sendq, recvq


def ports_of(endpoints) -> list[int]:
    ports = []
    for endpoint in endpoints or ():
        if endpoint and endpoint.startswith("tcp://"):
            port = endpoint.rsplit(":", 1)[1]
            if port.isdigit():
                ports.append(int(port))
    return ports
