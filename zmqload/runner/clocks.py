"""Host clocks (run --master): each task's CLOCK_MONOTONIC put onto the driver's before t0 by
ping-pong with the driver's clock server, the fastest exchange kept (offset and uncertainty:
docs/CLUSTER.md). The server also hears where each task runs and its copy to an --out URI."""

from __future__ import annotations

import contextlib
import json
import threading
import time
from dataclasses import dataclass
from typing import Any, Iterator

import zmq

from .. import _engine
from ..contract.curve import CurveKeys
from ..errors import RunError
from .curve import secure_zmq

ROUNDS = 200
"""Exchanges per task: a few hundred round trips of ~0.1 ms, the fastest is kept."""
ROUND_TIMEOUT_MS = 5000
"""An exchange unanswered this long: the clock server is unreachable."""

PING, PLACED, UPLOAD = b"ping", b"placed", b"upload"


@dataclass(frozen=True)
class Offset:
    """A host's clock minus the reference's, and how far the true offset may lie from it."""

    offset_ns: int
    uncertainty_ns: int


def offset_of(t1: int, t2: int, t3: int, t4: int) -> Offset:
    """One exchange's estimate (stamps as above)."""
    round_trip = (t4 - t1) - (t3 - t2)
    return Offset(((t1 - t2) + (t4 - t3)) // 2, (round_trip + 1) // 2)


class ClockServer:
    """On the driver: answers pings with its own two stamps and collects where each task runs.
    A thread of its own, so the controller's loop does not delay an answer."""

    def __init__(self, host: str, keys: CurveKeys | None = None):
        self.context = zmq.Context()
        self.socket = self.context.socket(zmq.ROUTER)
        self.socket.setsockopt(zmq.LINGER, 0)
        secure_zmq(self.socket, keys, server=True)
        self.socket.bind(f"tcp://{host}:*")
        last = self.socket.getsockopt(zmq.LAST_ENDPOINT)
        self.endpoint = last.decode() if isinstance(last, bytes) else str(last)
        self.placed: dict[str, dict[str, Any]] = {}  # worker name -> where it runs
        self.uploads: dict[
            str, dict[str, dict[str, Any]]
        ] = {}  # worker name -> its copy's news by kind
        self._stop = threading.Event()
        self.thread = threading.Thread(target=self._serve, name="zmqload-clock", daemon=True)
        self.thread.start()

    def _serve(self) -> None:
        poller = zmq.Poller()
        poller.register(self.socket, zmq.POLLIN)
        while not self._stop.is_set():
            if not poller.poll(100):
                continue
            peer, kind, body = self.socket.recv_multipart()
            t2 = _engine.now_ns()
            if kind == PING:
                self.socket.send_multipart([peer, body, b"%d %d" % (t2, _engine.now_ns())])
            elif kind == PLACED:
                where = json.loads(body)
                self.placed[where["worker"]] = where
                self.socket.send_multipart([peer, b"", b""])
            elif kind == UPLOAD:
                news = json.loads(body)
                news["at"] = time.monotonic()
                self.uploads.setdefault(news["worker"], {})[news["kind"]] = news
                self.socket.send_multipart([peer, b"", b""])

    def close(self) -> None:
        self._stop.set()
        self.thread.join(5)
        self.socket.close(0)
        self.context.term()


@contextlib.contextmanager
def _dealer(endpoint: str, keys: CurveKeys | None) -> Iterator[zmq.Socket[bytes]]:
    """A socket to the clock server, each answer awaited ROUND_TIMEOUT_MS at most."""
    context = zmq.Context()
    sock: zmq.Socket[bytes] = context.socket(zmq.DEALER)
    sock.setsockopt(zmq.LINGER, 0)
    secure_zmq(sock, keys, server=False)
    sock.setsockopt(zmq.RCVTIMEO, ROUND_TIMEOUT_MS)
    sock.connect(endpoint)
    try:
        yield sock
    except zmq.Again:
        raise RunError(
            f"the driver's clock at {endpoint} did not answer within {ROUND_TIMEOUT_MS / 1000:g} s "
            "(can this executor reach the driver's host?)"
        ) from None
    finally:
        sock.close(0)
        context.term()


def measure(endpoint: str, rounds: int = ROUNDS, keys: CurveKeys | None = None) -> Offset:
    """This host's offset to the clock server's, from the fastest of `rounds` exchanges."""
    best: Offset | None = None
    with _dealer(endpoint, keys) as sock:
        for _ in range(rounds):
            t1 = _engine.now_ns()
            sock.send_multipart([PING, b"%d" % t1])
            echoed, stamps = sock.recv_multipart()
            t4 = _engine.now_ns()
            if int(echoed) != t1:
                continue
            t2, t3 = map(int, stamps.split())
            got = offset_of(t1, t2, t3, t4)
            if best is None or got.uncertainty_ns < best.uncertainty_ns:
                best = got
    assert best is not None
    return best


def report_placed(endpoint: str, where: dict[str, Any], keys: CurveKeys | None = None) -> None:
    """Tell the driver where this task runs (answered, so it is there before the run starts)."""
    with _dealer(endpoint, keys) as sock:
        sock.send_multipart([PLACED, json.dumps(where).encode()])
        sock.recv_multipart()


def report_upload(
    endpoint: str, kind: str, news: dict[str, Any], keys: CurveKeys | None = None
) -> None:
    """Tell the driver how this task's copy to an --out URI goes (`kind`: runner/task_out.py)."""
    with _dealer(endpoint, keys) as sock:
        sock.send_multipart([UPLOAD, json.dumps({**news, "kind": kind}).encode()])
        sock.recv_multipart()


def align(endpoint: str, keys: CurveKeys | None = None) -> Offset:
    """Measure this host's offset and move this process's engine clock onto the reference's."""
    found = measure(endpoint, keys=keys)
    _engine.set_clock_offset(_engine.clock_offset_ns() + found.offset_ns)
    return found
