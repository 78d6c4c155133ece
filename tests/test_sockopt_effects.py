"""--router-handover, the heartbeats and --xpub-nodrop in short real runs, checked without zmqload's
code and against plain pyzmq sockets: a second DEALER with a routing id in use reaches zmqload's
ROUTER only with handover; zmqload's PUSH drops its connection to a frozen PULL (the kernel's
CLOSE_WAIT) within the heartbeat timeout, and not without; the proxy waits instead of dropping."""

from __future__ import annotations

import glob
import os
import socket
import subprocess
import sys
import threading
import time

import numpy as np
import pyarrow.parquet as pq
import pytest
import zmq
from conftest import read_table
from zmq.utils.monitor import recv_monitor_message

import zmqload
from zmqload.store.record_files import read_run

BEATS = dict(heartbeat_ivl_ms=100, heartbeat_timeout_ms=300)
OLD, NEW = 11, 22  # the sizes of the first DEALER's messages and of the second's
NEW_MESSAGES = 20
WAIT_S = 20.0  # a bound on each wait for progress (a loaded machine starts processes slowly)


# -- router handover ---------------------------------------------------------------------------
def _dealer(context: zmq.Context, port: int, size: int, count: int) -> zmq.Socket:
    """A DEALER with routing id b"w" (never reconnecting), connected and through its handshake,
    that has queued `count` messages of `size` bytes."""
    dealer = context.socket(zmq.DEALER)
    dealer.linger = 0
    dealer.routing_id = b"w"
    dealer.setsockopt(zmq.RECONNECT_IVL, -1)  # one connection: a second one is a new peer
    events = dealer.get_monitor_socket(zmq.EVENT_HANDSHAKE_SUCCEEDED)
    dealer.connect(f"tcp://127.0.0.1:{port}")
    assert events.poll(int(WAIT_S * 1000)), "no handshake"
    recv_monitor_message(events)
    for _ in range(count):
        dealer.send(bytes(size))
    return dealer


def _two_dealers(port: int, done: threading.Event) -> None:
    """The first DEALER connected, then a second with its routing id while the first stays."""
    deadline = time.monotonic() + WAIT_S
    while time.monotonic() < deadline:  # the ROUTER binds when its run has started
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            break
        except OSError:
            time.sleep(0.02)
    context = zmq.Context()
    try:
        _dealer(context, port, OLD, 5)
        _dealer(context, port, NEW, NEW_MESSAGES)
        done.wait(WAIT_S)
    finally:
        context.destroy(0)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def handover_runs(tmp_path_factory):
    """zmqload's ROUTER (--role consumer) under the two DEALERs, without and with handover: the
    second DEALER's messages received, from the foreign records with numpy."""
    out = str(tmp_path_factory.mktemp("handover"))
    received = {}
    for handover in (False, True):
        port, done = _free_port(), threading.Event()
        users = threading.Thread(target=_two_dealers, args=(port, done), daemon=True)
        users.start()
        try:
            result = zmqload.run(
                pattern="dealer-router",
                role="consumer",
                consumers_bind=f"tcp://127.0.0.1:{port}",
                duration=1.0,
                drain_timeout_ms=200,
                router_handover=handover,
                out=out,
                run_name=f"handover-{handover}",
            )
        finally:
            done.set()
            users.join(WAIT_S)
        (part,) = glob.glob(os.path.join(result.run_dir, "foreign", "*.parquet"))
        sizes = pq.read_table(part).column("size").to_numpy()
        received[handover] = (int((sizes == NEW).sum()), read_run(result.run_dir))
    return received


def test_handover_lets_a_second_dealer_with_the_id_in_use_through(handover_runs):
    without, _ = handover_runs[False]
    with_handover, record = handover_runs[True]
    assert without == 0 and with_handover == NEW_MESSAGES, handover_runs
    assert record.workload.router_handover and not handover_runs[False][1].workload.router_handover


def _plain_router(handover: bool) -> int:
    """The same two DEALERs against a plain pyzmq ROUTER: the second's messages received."""
    context = zmq.Context()
    try:
        router = context.socket(zmq.ROUTER)
        router.linger = 0
        router.setsockopt(zmq.ROUTER_HANDOVER, int(handover))
        port = router.bind_to_random_port("tcp://127.0.0.1")
        _dealer(context, port, OLD, 5)
        _dealer(context, port, NEW, NEW_MESSAGES)
        got, deadline = 0, time.monotonic() + 0.5  # all there within a few ms when they come
        while time.monotonic() < deadline and got < NEW_MESSAGES:
            if router.poll(50):
                got += len(router.recv_multipart()[1]) == NEW
        return got
    finally:
        context.destroy(0)


def test_a_plain_pyzmq_router_does_the_same():
    assert (_plain_router(False), _plain_router(True)) == (0, NEW_MESSAGES)


# -- heartbeats --------------------------------------------------------------------------------
FROZEN_PEER = r"""
import os, signal, sys, time, zmq
pull = zmq.Context().socket(zmq.PULL)
print(pull.bind_to_random_port("tcp://127.0.0.1"), flush=True)
for _ in range(int(sys.argv[1])):
    pull.recv()
print(time.monotonic(), flush=True)  # CLOCK_MONOTONIC, the test's too
os.kill(os.getpid(), signal.SIGSTOP)  # frozen, its connections open
"""
WATCH_S = 1.0  # after the freeze: beyond the timeout, within the producer's sending
EARLIEST_DROP_S = (BEATS["heartbeat_timeout_ms"] - BEATS["heartbeat_ivl_ms"]) / 1000
"""A PING just before the freeze, unanswered: its timeout runs from then."""


def _close_waits(port: int) -> int:
    """Connections of the listener on `port` that its peer has closed (state CLOSE_WAIT)."""
    count = 0
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        with open(table) as f:
            next(f)
            for line in f:
                fields = line.split()
                count += int(fields[1].rsplit(":", 1)[1], 16) == port and fields[3] == "08"
    return count


def _stopped(pid: int) -> bool:
    """Waits until the child `pid` stops itself (SIGSTOP) or ends: whether it stopped."""
    _, status = os.waitpid(pid, os.WUNTRACED)
    return os.WIFSTOPPED(status)


class FrozenPull:
    """A plain pyzmq PULL in a process of its own that reads `messages` and then stops itself;
    `dropped_after_s`: how long after it stopped (its own clock reading, just before) one of its
    connections was closed by the other side, None if not within WATCH_S."""

    def __init__(self, messages: int):
        self.process = subprocess.Popen(
            [sys.executable, "-c", FROZEN_PEER, str(messages)], stdout=subprocess.PIPE, text=True
        )
        self.port = int(self.process.stdout.readline())
        self.dropped_after_s: float | None = None
        self.froze = False
        self.watcher = threading.Thread(target=self._watch, daemon=True)
        self.watcher.start()

    def _watch(self) -> None:
        said = self.process.stdout.readline()  # '' if it never stops (killed at the end)
        if not said:
            return
        stopped = float(said)
        self.froze = _stopped(self.process.pid)  # it stops itself right after saying when
        while time.monotonic() < stopped + WATCH_S:
            if _close_waits(self.port):
                self.dropped_after_s = time.monotonic() - stopped
                return
            time.sleep(0.005)

    def end(self) -> None:
        self.watcher.join(WAIT_S)  # its window ends within the run's sends when the peer froze
        self.process.kill()
        self.process.wait()


@pytest.fixture(scope="module")
def heartbeat_runs(tmp_path_factory):
    """zmqload's PUSH (--role producer) to a PULL that freezes, with and without heartbeats."""
    out = str(tmp_path_factory.mktemp("heartbeats"))
    runs = {}
    for name, beats in (("beats", BEATS), ("none", {})):
        peer = FrozenPull(200)  # 0.1 s into the run's 1.5 s of sends
        try:
            result = zmqload.run(
                pattern="push-pull",
                role="producer",
                producers_connect=f"tcp://127.0.0.1:{peer.port}",
                rate=2000,
                duration=1.5,
                linger_ms=0,
                out=out,
                run_name=name,
                **beats,
            )
        finally:
            peer.end()
        assert peer.froze, f"{name}: the PULL did not get its messages"
        runs[name] = (peer.dropped_after_s, read_run(result.run_dir))
    return runs


def test_heartbeats_drop_the_connection_to_a_frozen_peer_within_the_timeout(heartbeat_runs):
    beats, record = heartbeat_runs["beats"]
    assert beats is not None and EARLIEST_DROP_S <= beats, heartbeat_runs
    assert heartbeat_runs["none"][0] is None, heartbeat_runs
    w = record.workload
    assert (w.heartbeat_ivl_ms, w.heartbeat_timeout_ms, w.heartbeat_ttl_ms) == (100, 300, None)


def test_a_plain_pyzmq_push_with_the_same_heartbeats_drops_alike():
    peer = FrozenPull(200)
    context = zmq.Context()
    try:
        push = context.socket(zmq.PUSH)
        push.linger = 0
        push.setsockopt(zmq.HEARTBEAT_IVL, BEATS["heartbeat_ivl_ms"])
        push.setsockopt(zmq.HEARTBEAT_TIMEOUT, BEATS["heartbeat_timeout_ms"])
        push.connect(f"tcp://127.0.0.1:{peer.port}")
        deadline = time.monotonic() + 2 * WAIT_S
        while peer.watcher.is_alive() and time.monotonic() < deadline:
            try:  # the frozen peer's queue fills: sends stop being taken, the heartbeats go on
                push.send(bytes(16), zmq.NOBLOCK)
            except zmq.Again:
                pass
            time.sleep(0.0005)
    finally:
        peer.end()
        context.destroy(0)
    assert (
        peer.froze and peer.dropped_after_s is not None and EARLIEST_DROP_S <= peer.dropped_after_s
    )


# -- xpub nodrop -------------------------------------------------------------------------------
NODROP_COUNT = 600


@pytest.fixture(scope="module")
def nodrop_runs(tmp_path_factory):
    """The proxy pattern with a slow SUB behind a small XPUB queue and a PUB whose SNDHWM holds the
    whole run, without and with --xpub-nodrop: the seqs received, from the recvs records."""
    out = str(tmp_path_factory.mktemp("nodrop"))
    runs = {}
    for nodrop in (False, True):
        result = zmqload.run(
            pattern="proxy",
            count=NODROP_COUNT,
            rate=20_000,
            size=16384,  # more than the kernel's buffers between the proxy and the SUB hold
            consumer_delay_us=400,
            proxy_sndhwm=50,
            rcvhwm=50,
            sndhwm=NODROP_COUNT,
            xpub_nodrop=nodrop,
            drain_timeout_ms=200,
            out=out,
            run_name=f"nodrop-{nodrop}",
        )
        seqs = read_table(result.run_dir, "recvs").column("seq").to_numpy()
        runs[nodrop] = (result, np.unique(seqs).size)
    return runs


def test_nodrop_makes_the_proxy_wait_instead_of_dropping(nodrop_runs):
    dropping, kept = nodrop_runs[False], nodrop_runs[True]
    assert kept[1] == NODROP_COUNT and kept[0].lost == 0, kept[0].summary()
    assert dropping[1] < NODROP_COUNT and dropping[0].lost == NODROP_COUNT - dropping[1]
    assert read_run(kept[0].run_dir).workload.xpub_nodrop


def test_a_plain_pyzmq_xpub_with_nodrop_refuses_a_send_at_its_hwm():
    """The libzmq rule under the option: at SNDHWM an XPUB drops silently, with NODROP says EAGAIN."""
    context = zmq.Context()
    try:
        taken = {}
        for nodrop in (False, True):
            xpub, sub = context.socket(zmq.XPUB), context.socket(zmq.SUB)
            xpub.sndhwm, sub.rcvhwm = 10, 10
            xpub.setsockopt(zmq.XPUB_NODROP, int(nodrop))
            xpub.bind(f"inproc://nodrop-{nodrop}")
            sub.connect(f"inproc://nodrop-{nodrop}")
            sub.subscribe(b"")
            assert xpub.poll(int(WAIT_S * 1000)) and xpub.recv() == b"\x01"  # subscribed
            taken[nodrop] = 0
            for _ in range(100):
                try:
                    xpub.send(b"m", zmq.NOBLOCK)
                    taken[nodrop] += 1
                except zmq.Again:
                    break
            xpub.close(0)
            sub.close(0)
    finally:
        context.destroy(0)
    assert taken[False] == 100 and taken[True] < 100, taken
