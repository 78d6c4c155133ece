"""Kernel queue sampling on real loopback tcp connections of this process."""

from __future__ import annotations

import socket
import time

from zmqload.runner.kernel_queues import TcpQueues, ports_of


def _wait_for(
    queues: TcpQueues, expected: tuple[int, int], timeout_s: float = 3.0
) -> tuple[int, int]:
    deadline = time.monotonic() + timeout_s
    seen = queues.sample()
    while seen != expected and time.monotonic() < deadline:
        time.sleep(0.01)
        seen = queues.sample()
    return seen


def test_unread_bytes_show_in_the_receive_queue_and_drain():
    with socket.create_server(("127.0.0.1", 0)) as server:
        port = server.getsockname()[1]
        with socket.create_connection(("127.0.0.1", port)) as client:
            peer, _ = server.accept()
            with peer:
                queues = TcpQueues([port])
                elsewhere = TcpQueues([port + 1 if port < 65535 else port - 1])
                assert queues.sample() == (0, 0)
                client.sendall(b"x" * 10_000)
                # acknowledged by the peer's kernel (send queue 0), waiting unread there
                assert _wait_for(queues, (0, 10_000)) == (0, 10_000)
                assert elsewhere.sample() == (0, 0)
                got = 0
                while got < 10_000:
                    got += len(peer.recv(65536))
                assert _wait_for(queues, (0, 0)) == (0, 0)


def test_closed_connection_is_dropped_and_nothing_is_owned():
    with socket.create_server(("127.0.0.1", 0)) as server:
        port = server.getsockname()[1]
        client = socket.create_connection(("127.0.0.1", port))
        peer, _ = server.accept()
        queues = TcpQueues([port])
        client.sendall(b"y" * 100)
        assert _wait_for(queues, (0, 100)) == (0, 100)
        peer.close()  # the sampler must not keep the connection alive
        assert _wait_for(queues, (0, 0)) == (0, 0)
        client.close()


def test_no_tcp_ports_means_unknown():
    assert TcpQueues([]).sample() == (-1, -1)
    assert ports_of(["tcp://127.0.0.1:5555", "ipc:///tmp/x", "inproc://y", None]) == [5555]
