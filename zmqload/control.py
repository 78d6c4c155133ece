"""The control channel between the controller and its workers (pyzmq, not the engine).

The controller binds a ROUTER; every worker connects a DEALER whose routing id is its
name ("p0", "c1", ...). Messages are small dicts (pickled), each with a "type":

  worker -> controller: ready {endpoint}, warm, progress {...}, done {...}, final {...}, error {message}
  controller -> worker: warmup, start {t0_ns}, producers_done {expected}, stop {interrupted}
"""
from __future__ import annotations

import os
import pickle
import tempfile

import zmq


def new_endpoint() -> tuple[str, str]:
    """A fresh ipc endpoint in its own temporary directory (returned for cleanup)."""
    directory = tempfile.mkdtemp(prefix="zmqload-ctl-")
    return f"ipc://{os.path.join(directory, 'control')}", directory


class ControlServer:
    def __init__(self, endpoint: str):
        self.context = zmq.Context()
        self.socket = self.context.socket(zmq.ROUTER)
        self.socket.setsockopt(zmq.LINGER, 0)
        self.socket.setsockopt(zmq.ROUTER_MANDATORY, 1)
        self.socket.bind(endpoint)
        self.endpoint = endpoint

    def send(self, worker: str, message: dict) -> bool:
        try:
            self.socket.send_multipart([worker.encode(), pickle.dumps(message)])
            return True
        except zmq.ZMQError:        # that worker is gone (EHOSTUNREACH)
            return False

    def recv(self, timeout_ms: int) -> tuple[str, dict] | None:
        if not self.socket.poll(timeout_ms):
            return None
        worker, payload = self.socket.recv_multipart()
        return worker.decode(), pickle.loads(payload)

    def close(self) -> None:
        self.socket.close(0)
        self.context.term()


class ControlClient:
    def __init__(self, endpoint: str, name: str):
        self.context = zmq.Context()
        self.socket = self.context.socket(zmq.DEALER)
        self.socket.setsockopt(zmq.ROUTING_ID, name.encode())
        self.socket.setsockopt(zmq.LINGER, 2000)
        self.socket.connect(endpoint)
        self.name = name

    def send(self, message_type: str, **fields) -> None:
        fields["type"] = message_type
        self.socket.send(pickle.dumps(fields))

    def recv(self, timeout_ms: int = 0) -> dict | None:
        if not self.socket.poll(timeout_ms):
            return None
        return pickle.loads(self.socket.recv())

    def close(self) -> None:
        self.socket.close()
        self.context.term()
