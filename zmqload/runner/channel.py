"""The control channel between the controller and its workers (pyzmq, not the engine): a ROUTER on a
private endpoint, a DEALER per worker named by its id, a CURVE server with --curve on
(docs/ARCHITECTURE.md, "Process model")."""

from __future__ import annotations

import os
import tempfile

import zmq

from ..contract import control
from ..contract.curve import CurveKeys
from ..contract.ids import WorkerId
from .curve import client_view, secure_zmq


def new_endpoint(tcp_host: str | None = None) -> tuple[str, str]:
    """A fresh ipc endpoint in its own temporary directory (returned for cleanup); with
    `tcp_host` (workers on other hosts: --master) a tcp endpoint there, any free port."""
    directory = tempfile.mkdtemp(prefix="zmqload-ctl-")
    if tcp_host is not None:
        return f"tcp://{tcp_host}:*", directory
    return f"ipc://{os.path.join(directory, 'control')}", directory


class ControlServer:
    def __init__(self, endpoint: str, keys: CurveKeys | None = None):
        self.context = zmq.Context()
        self.socket = self.context.socket(zmq.ROUTER)
        self.socket.setsockopt(zmq.LINGER, 0)
        self.socket.setsockopt(zmq.ROUTER_MANDATORY, 1)
        # a restarted worker's new process (--restart) connects under the same routing id while the
        # ROUTER may still hold the killed one's pipe: the new connection takes the id over
        self.socket.setsockopt(zmq.ROUTER_HANDOVER, 1)
        secure_zmq(self.socket, keys, server=True)
        self.client_keys = client_view(keys)  # what each worker is given (WorkerSpec.control_curve)
        self.socket.bind(endpoint)
        last = self.socket.getsockopt(zmq.LAST_ENDPOINT)
        self.endpoint = (
            last.decode() if isinstance(last, bytes) else str(last)
        )  # tcp: the port it got

    def send(self, worker: WorkerId, message: control.Message) -> bool:
        try:
            self.socket.send_multipart([str(worker).encode(), *control.encode(message)], copy=False)
            return True
        except zmq.ZMQError:  # that worker is gone (EHOSTUNREACH)
            return False

    def recv(self, timeout_ms: int) -> tuple[WorkerId, control.Message] | None:
        """(worker, message) or None if nothing came within timeout_ms."""
        if not self.socket.poll(timeout_ms):
            return None
        worker, *frames = self.socket.recv_multipart(copy=False)
        return control.sender(worker.bytes), control.decode([f.buffer for f in frames])

    def close(self) -> None:
        self.socket.close(0)
        self.context.term()


class ControlClient:
    def __init__(self, endpoint: str, worker: WorkerId, keys: CurveKeys | None = None):
        self.context = zmq.Context()
        self.socket = self.context.socket(zmq.DEALER)
        self.socket.setsockopt(zmq.ROUTING_ID, str(worker).encode())
        self.socket.setsockopt(zmq.LINGER, 2000)
        secure_zmq(self.socket, keys, server=False)
        self.socket.connect(endpoint)

    def send(self, message: control.Message) -> None:
        self.socket.send_multipart(control.encode(message), copy=False)

    def recv(self, timeout_ms: int = 0) -> control.Message | None:
        if not self.socket.poll(timeout_ms):
            return None
        return control.decode([f.buffer for f in self.socket.recv_multipart(copy=False)])

    def close(self, linger_ms: int | None = None) -> None:
        self.socket.close(linger_ms)
        self.context.term()
