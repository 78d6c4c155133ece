"""--parts K (issue 27): multipart messages, zmqload's header in the first frame. Checked against
plain pyzmq as a user writes it: a PULL that reads every frame, and PULL|PUSH forwarders (one
whole, one that drops a frame of every 10th message and counts what it mangled). Loopback only,
bounded in count and time."""

from __future__ import annotations

import json
import struct
import threading
from typing import Callable

import pytest
import zmq

from conftest import end_with_the_test, free_ports, recv_until, zmqload_cli


def _run(*args: str) -> dict:
    done = zmqload_cli("run", "--json", *args, timeout=180)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


class Forwarder:
    """A user's PULL|PUSH forwarder in a thread (its PULL for zmqload's producers, its PUSH for the
    consumers). `mangle`: every 10th multipart message loses its last frame, and the forwarder counts them.
    `change`: what the device does to each message's frames (tests/test_sizes.py). Until stop() (at the
    latest at the end of the test: tests/conftest.py); the thread closes its sockets and context itself."""

    def __init__(
        self, mangle: bool = False, change: Callable[[list[bytes]], list[bytes]] | None = None
    ):
        self.context = zmq.Context()
        self.front, self.back = self.context.socket(zmq.PULL), self.context.socket(zmq.PUSH)
        self.front.setsockopt(zmq.RCVTIMEO, 200)
        self.back.setsockopt(
            zmq.SNDTIMEO, 200
        )  # a send with no consumer to take it looks at `stopped`
        front_port, back_port = free_ports(2)
        self.front.bind(f"tcp://127.0.0.1:{front_port}")
        self.back.bind(f"tcp://127.0.0.1:{back_port}")
        self.producers, self.consumers = (
            f"tcp://127.0.0.1:{front_port}",
            f"tcp://127.0.0.1:{back_port}",
        )
        self.mangle, self.mangled, self.forwarded, self.change = mangle, 0, 0, change
        self.stopped = threading.Event()
        self.thread = threading.Thread(target=self._forward, daemon=True, name="Forwarder._forward")
        end_with_the_test(self.stop)
        self.thread.start()

    def _forward(self) -> None:
        try:
            while not self.stopped.is_set():
                try:
                    frames = self.front.recv_multipart()
                except zmq.Again:
                    continue
                if len(frames) > 1:  # a data message (zmqload's warm-ups are single frames)
                    if self.mangle and self.forwarded % 10 == 9:
                        frames = frames[:-1]
                        self.mangled += 1
                    self.forwarded += 1
                frames = self.change(frames) if self.change else frames
                while not self.stopped.is_set():
                    try:
                        self.back.send_multipart(frames)
                        break
                    except zmq.Again:  # as a blocking send, unless stopped
                        continue
        finally:
            self.front.close(0)
            self.back.close(0)
            self.context.term()

    def stop(self) -> None:
        self.stopped.set()
        self.thread.join(timeout=10)
        assert not self.thread.is_alive(), "the Forwarder's thread did not end within 10 s"


def test_parts_are_sent_whole_and_counted_in_bytes(tmp_path):
    got = _run(
        "--parts", "4", "--size", "32", "--count", "20000", "--rate", "40k", "--out", str(tmp_path)
    )
    assert got["received"] == 20_000 and got["lost"] == 0 and got["frame_mismatches"] == 0
    span = got["elapsed_s"]
    # MB/s counts every frame: received x size x parts over the span the throughput uses
    assert got["throughput_mb"] == pytest.approx(got["throughput_msgs"] * 32 * 4 / 1e6, rel=1e-9)
    assert span > 0


@pytest.mark.parametrize("mangle", [False, True], ids=["whole", "a-frame-dropped"])
def test_through_a_users_forwarder_every_frame_counted(tmp_path, mangle):
    """zmqload on both sides of a plain pyzmq forwarder: whole, nothing mismatched; one that drops
    the last frame of every 10th message, exactly the messages it says it mangled, none lost."""
    device = Forwarder(mangle=mangle)
    try:
        got = _run(
            "--parts",
            "3",
            "--producers-connect",
            device.producers,
            "--consumers-connect",
            device.consumers,
            "--count",
            "5000",
            "--rate",
            "20k",
            "--out",
            str(tmp_path),
        )
    finally:
        device.stop()
    assert got["received"] == 5000 and got["lost"] == 0
    assert got["frame_mismatches"] == device.mangled == (500 if mangle else 0)


def test_a_users_pull_sees_every_frame_with_the_header_first(tmp_path):
    context = zmq.Context()
    pull = context.socket(zmq.PULL)
    pull.setsockopt(zmq.RCVTIMEO, 90_000)
    (port,) = free_ports(1)
    pull.bind(f"tcp://127.0.0.1:{port}")
    shapes, seqs = [], []
    ended = threading.Event()

    def read() -> None:
        try:
            while True:
                frames = recv_until(pull, ended, multipart=True)
                pull.setsockopt(zmq.RCVTIMEO, 3000)
                shapes.append(tuple(len(f) for f in frames))
                (word,) = struct.unpack_from("<Q", frames[0], 0)
                seqs.append(word & ((1 << 40) - 1))  # docs/RECORDS.md: seq is the low 40 bits
        except zmq.Again:
            pass

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    try:
        got = _run(
            "--role",
            "producer",
            "--producers-connect",
            f"tcp://127.0.0.1:{port}",
            "--parts",
            "5",
            "--size",
            "20",
            "--count",
            "3000",
            "--rate",
            "20k",
            "--out",
            str(tmp_path),
        )
        reader.join(timeout=60)
    finally:
        ended.set()  # a reader still waiting (the run failed) lets go of the socket within 0.1 s
        reader.join(timeout=10)
        assert not reader.is_alive(), "the reader did not end: its socket is not closed under it"
        pull.close(0)
        context.term()
    assert got["sent"] == 3000
    assert set(shapes) == {(20, 20, 20, 20, 20)} and seqs == list(range(3000))


@pytest.mark.parametrize(
    "args, flag",
    [
        (("--parts", "2", "--pattern", "req-rep"), "--parts"),
        (("--parts", "2", "--conflate", "consumers"), "--parts"),
        (("--parts", "0"), "--parts"),
        (("--parts", "65"), "--parts"),
    ],
)
def test_bad_parts_are_one_line_exit_2_nothing_left(tmp_path, args, flag):
    done = zmqload_cli("run", *args, "--count", "10", "--out", str(tmp_path))
    assert done.returncode == 2, done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and flag in lines[0] and "accepted" in lines[0], done.stderr
    assert not (tmp_path.exists() and any(tmp_path.iterdir()))
