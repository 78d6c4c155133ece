"""The consumer side alone (issue 27): `--role consumer` records what a producer of the user's
sends, and the split halves of one --run-name are joined by `report` into one run with exact
accounting. The users' producers are plain pyzmq in a thread of the test, writing zmqload's
header themselves with struct (docs/RECORDS.md) or writing foreign bytes; the figures are held to
what they sent and to numpy/pyarrow straight over the Parquet files. Loopback only, bounded."""

from __future__ import annotations

import glob
import json
import os
import subprocess
import sys
import threading
import time

import numpy as np
import pyarrow.parquet as pq
import pytest
import zmq

from conftest import end_with_the_test, free_ports, report_here, until_listening, zmqload_cli
from users_header import header, hostile_messages


class UserPush:
    """A user's PUSH (or PUB) in a thread: binds `endpoint`, waits for a peer, sends `messages`
    (bytes, or a callable making them at send time) `gap_s` apart, then closes with linger.
    The thread alone uses the socket after the start, and closes it and terminates its context
    itself; stop() (called at the end of the test, passed or failed: tests/conftest.py) ends it
    early: a send waiting for a peer gives up every SEND_TIMEOUT_MS to look, and the socket then
    closes with linger 0."""

    SEND_TIMEOUT_MS = 100
    STOP_S = 15  # the linger of a finished sender's close (5 s) fits in it

    def __init__(
        self,
        endpoint: str,
        messages,
        kind: int = zmq.PUSH,
        gap_s: float = 0.0005,
        wait_s: float = 0.0,
    ):
        self.context = zmq.Context()
        self.sock = self.context.socket(kind)
        self.sock.setsockopt(zmq.LINGER, 5000)
        self.sock.bind(endpoint)
        self.messages, self.gap_s, self.wait_s = messages, gap_s, wait_s
        self._start()

    def _start(self) -> None:
        """The sending thread, on the socket made by the constructor; ended with the test."""
        self.sent: list[bytes] = []
        self.stopped = threading.Event()
        self.sock.setsockopt(zmq.SNDTIMEO, self.SEND_TIMEOUT_MS)
        self.thread = threading.Thread(
            target=self._send, daemon=True, name=f"{type(self).__name__}._send"
        )
        end_with_the_test(self.stop)
        self.thread.start()

    def _send(self) -> None:
        try:
            if self.stopped.wait(self.wait_s):
                return
            if self.sock.type == zmq.XPUB:
                while not self.sock.poll(self.SEND_TIMEOUT_MS):
                    if self.stopped.is_set():
                        return
                self.sock.recv()  # a subscriber's subscription: from here on nothing is lost to joining
            for message in self.messages:
                if self.stopped.is_set():
                    return
                body = message() if callable(message) else message
                while True:
                    try:
                        self.sock.send(body)
                        break
                    except (
                        zmq.Again
                    ):  # no peer to take it yet (SNDTIMEO): as a blocking send, unless stopped
                        if self.stopped.is_set():
                            return
                self.sent.append(body)
                if self.gap_s:
                    time.sleep(self.gap_s)
        finally:
            self.sock.close(linger=0 if self.stopped.is_set() else None)  # None: its own LINGER
            self.context.term()

    def join(self) -> None:
        self.thread.join(timeout=60)
        assert not self.thread.is_alive()

    def stop(self) -> None:
        """Ends the sending now (what was not sent is not in `sent`) and waits for the thread, which
        closes the socket and terminates the context."""
        self.stopped.set()
        self.thread.join(timeout=self.STOP_S)
        assert not self.thread.is_alive(), (
            f"{type(self).__name__}'s thread did not end within {self.STOP_S} s"
        )


def _run(*args: str, timeout: int = 120) -> dict:
    done = zmqload_cli("run", "--json", *args, timeout=timeout)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def _table(run_dir: str, kind: str):
    return pq.ParquetDataset(sorted(glob.glob(os.path.join(run_dir, kind, "*.parquet")))).read()


def test_a_users_foreign_messages_are_counted_timed_and_sized_never_an_error(tmp_path):
    """Text, short frames and random bytes (none with zmqload's header by docs/RECORDS.md's rule):
    each one is foreign, with its own size, none received as zmqload's."""
    rng = np.random.default_rng(7)
    bodies = [
        b"hello %d" % i
        if i % 3 == 0
        else b"\x01\x02"
        if i % 3 == 1
        else rng.bytes(int(rng.integers(16, 300)))
        for i in range(600)
    ]
    (port,) = free_ports(1)
    user = UserPush(f"tcp://127.0.0.1:{port}", bodies, wait_s=0.5)
    got = _run(
        "--role",
        "consumer",
        "--consumers-connect",
        f"tcp://127.0.0.1:{port}",
        "--duration",
        "2",
        "--out",
        str(tmp_path),
    )
    user.join()
    assert len(user.sent) == 600
    assert got["status"] == "complete" and got["sends_seen"] is False
    assert got["sent"] is None and got["lost"] is None  # the producer is the user's: not seen
    assert got["received"] == 0 and got["streams"] == []
    foreign = _table(got["run_dir"], "foreign")
    sizes = foreign.column("size").to_numpy()
    # every message the user sent, each with its size (arrival order is send order on one PUSH)
    assert sizes.tolist() == [len(b) for b in user.sent]
    assert got["foreign"]["messages"] == 600 == got["consumers"][0]["foreign"]
    assert got["foreign"]["bytes"] == sum(len(b) for b in user.sent) == int(sizes.sum())
    t = foreign.column("t_recv_ns").to_numpy()
    assert np.all(np.diff(t) >= 0)
    assert got["foreign"]["span_s"] == pytest.approx((t[-1] - t[0]) / 1e9, rel=1e-9)
    # the gaps between arrivals as numpy finds them (the histogram's error is under 1%); what queued
    # before the consumer's start arrived in a burst, so the median is numpy's, not the send gap
    gaps = np.diff(t)
    assert got["foreign"]["gap_ns"]["max"] == pytest.approx(int(gaps.max()), rel=0.01)
    assert got["foreign"]["gap_ns"]["p50"] == pytest.approx(
        float(np.percentile(gaps, 50, method="higher")), rel=0.01, abs=50
    )
    assert got["foreign"]["rate_msgs"] == pytest.approx(599 / ((t[-1] - t[0]) / 1e9), rel=1e-6)


def test_a_users_producer_writing_zmqloads_header_is_accounted_by_seq(tmp_path):
    """A user's XPUB binding and writing zmqload's header itself (struct, its own clock): the
    consumer counts each seq, and the seqs the user skipped are the holes, by range."""
    skipped = set(range(100, 150)) | {700}
    seqs = [s for s in range(1000) if s not in skipped]
    (port,) = free_ports(1)
    user = UserPush(
        f"tcp://127.0.0.1:{port}",
        [lambda s=s: header(0, s, time.monotonic_ns()) + b"." * 48 for s in seqs],
        kind=zmq.XPUB,
        gap_s=0.0002,
    )
    got = _run(
        "--role",
        "consumer",
        "--pattern",
        "pub-sub",
        "--consumers-connect",
        f"tcp://127.0.0.1:{port}",
        "--duration",
        "3",
        "--out",
        str(tmp_path),
    )
    user.join()
    assert got["received"] == len(seqs) and got["foreign"]["messages"] == 0
    (stream,) = got["streams"]
    assert stream["holes"] == len(skipped)
    assert stream["missing_ranges"] == {"0": [[100, 149], [700, 700]]}  # fan-out: by consumer
    recvs = _table(got["run_dir"], "recvs")
    assert sorted(recvs.column("seq").to_numpy().tolist()) == seqs
    # latency from sent: the user's own monotonic stamps on one host
    lat = recvs.column("t_recv_ns").to_numpy() - recvs.column("t_sent_ns").to_numpy()
    assert lat.min() >= -1_000_000 and got["latency_sent_ns"]["max"] == pytest.approx(
        int(lat.max()), rel=0.01
    )


def _half(role: str, *args: str, out: str) -> subprocess.Popen:
    return end_with_the_test(
        subprocess.Popen(
            [
                sys.executable,
                "-m",
                "zmqload",
                "run",
                "--json",
                "--role",
                role,
                "--run-name",
                "feed",
                "--out",
                out,
                *args,
            ],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
    )


def _ended(half: subprocess.Popen) -> dict:
    out, err = half.communicate(timeout=120)
    assert half.returncode == 0, err
    return json.loads(out)


@pytest.mark.parametrize("lossy", [False, True], ids=["whole", "consumer-half-ends-first"])
def test_split_halves_are_joined_by_the_report_with_exact_accounting(spark, tmp_path, lossy):
    """The consumer half binds, the producer half connects (two processes, one --run-name). `report`
    joins them into run=feed: its counts equal numpy over the halves' own Parquet, and its intended
    times follow the producer half's schedule. When the consumer half stops first (pub-sub: the PUB
    then drops), the join counts as lost exactly the sends numpy finds unreceived. Whole: a stray
    PUSH on the consumer half's port sends garbage and forged headers beside the producer half;
    each is foreign, none joins the producer half's accounting."""
    (port,) = free_ports(1)
    endpoint = f"tcp://127.0.0.1:{port}"
    pattern = ("--pattern", "pub-sub") if lossy else ()
    # lossy: the consumer half records 3 s and drains 0.5 s at most, while the producer half sends for 6 s
    window = ("--duration", "3", "--drain-limit-s", "0.5") if lossy else ("--duration", "6")
    consumer = _half("consumer", *pattern, "--consumers-bind", endpoint, *window, out=str(tmp_path))
    until_listening(port)
    # lossy: the connecting PUB keeps its gone subscriber's pipe and would wait for it at close (LINGER -1)
    linger = ("--linger", "0") if lossy else ()
    producer = _half(
        "producer",
        *pattern,
        *linger,
        "--producers-connect",
        endpoint,
        "--rate",
        "10k",
        "--count",
        "60000" if lossy else "20000",
        out=str(tmp_path),
    )
    if not lossy:
        context = zmq.Context()
        stray = context.socket(zmq.PUSH)
        stray.setsockopt(zmq.LINGER, 5000)
        stray.connect(endpoint)
        messages, forged = hostile_messages(time.monotonic_ns())
        for frames in messages:
            stray.send_multipart(frames)
        stray.close()  # once all are delivered (linger), well inside the consumer half's 6 s
        context.term()
    c_got, p_got = _ended(consumer), _ended(producer)
    if not lossy:
        assert (
            c_got["foreign"]["messages"] == len(messages)
            and c_got["consumers"][0]["implausible"] == forged
        )
    assert c_got["sends_seen"] is False and p_got["receipt_seen"] is False
    done = report_here(str(tmp_path), "--out", str(tmp_path / "report"))  # on the session's Spark
    assert done.returncode == 0, done.stderr
    joined_dir = os.path.join(tmp_path, "run=feed")
    record = json.load(open(os.path.join(joined_dir, "run.json")))
    assert record["halves"]["producer"] == "run=feed.producer-half"
    assert record["workload"]["role"] == "both"
    sends = _table(p_got["run_dir"], "sends")
    recvs = _table(c_got["run_dir"], "recvs")
    sent = set(
        sends.filter(np.asarray(sends.column("status").to_numpy() == 0))
        .column("seq")
        .to_numpy()
        .tolist()
    )
    received = set(recvs.column("seq").to_numpy().tolist())
    counters = record["counters"]
    assert counters["sent"] == len(sent) == p_got["sent"]
    assert counters["unique_received"] == len(received & sent) == c_got["received"]
    assert counters["lost"] == len(sent - received)
    assert (counters["lost"] > 5000) if lossy else (counters["lost"] == 0)
    # the joined receipts carry the producer half's schedule: t0 + seq * 1e9 / rate
    t0 = p_got["generator"]["t0_ns"]
    joined = _table(joined_dir, "recvs")
    seq = joined.column("seq").to_numpy()
    assert np.array_equal(
        joined.column("t_intended_ns").to_numpy(), t0 + seq * 1_000_000_000 // 10_000
    )
    summary = open(os.path.join(tmp_path, "report", "summary.csv")).read()
    assert "feed" in summary and "feed.producer-half" not in summary
    if lossy:
        return
    # a second report reuses the join as it is
    before = os.path.getmtime(os.path.join(joined_dir, "run.json"))
    done = report_here(str(tmp_path), "--out", str(tmp_path / "report2"))
    assert done.returncode == 0 and os.path.getmtime(os.path.join(joined_dir, "run.json")) == before


def test_split_halves_join_a_restarted_consumer_with_its_loss_placed(tmp_path):
    """The consumer half restarts its PULL (--restart, it binds: the producer half's PUSH connects
    again); the join reads both of its processes' records and places what died with the first as
    dropped_restart, as numpy over the halves' Parquet finds it."""
    from zmqload.runner.halves import join

    (port,) = free_ports(1)
    endpoint = f"tcp://127.0.0.1:{port}"
    consumer = _half(
        "consumer",
        "--consumers-bind",
        endpoint,
        "--duration",
        "5",
        "--consumer-delay-us",
        "300",
        "--restart",
        "c0@2.2",  # the producer half starts 1-2 s after this half's schedule and sends for 3 s
        "--restart-gap-ms",
        "100",
        out=str(tmp_path),
    )
    until_listening(port)
    producer = _half(
        "producer",
        "--producers-connect",
        endpoint,
        "--rate",
        "5k",
        "--count",
        "15000",
        "--pacing",
        "sleep",
        out=str(tmp_path),
    )
    c_got, p_got = _ended(consumer), _ended(producer)
    (restart,) = c_got["restarts"]
    assert restart["worker"] == "c0" and restart["generation"] == 1
    joined = json.load(open(os.path.join(join(p_got["run_dir"], c_got["run_dir"]), "run.json")))
    sends, recvs = _table(p_got["run_dir"], "sends"), _table(c_got["run_dir"], "recvs")
    ok = np.unique(sends.column("seq").to_numpy()[sends.column("status").to_numpy() == 0])
    got = recvs.column("seq").to_numpy()
    before = _table_of(c_got["run_dir"], "part-c0-*.parquet").column("seq").to_numpy()
    after = _table_of(c_got["run_dir"], "part-c0.g1-*.parquet").column("seq").to_numpy()
    lo, hi = int(before.max()) + 1, int(after.min())
    placed = int(np.setdiff1d(ok[(ok >= lo) & (ok < hi)], got).size)
    counters = joined["counters"]
    assert counters["dropped_restart"] == placed == joined["restarts"][0]["lost"] > 0
    assert counters["lost"] == len(np.setdiff1d(ok, got)) == placed
    assert counters["unique_received"] == len(np.intersect1d(ok, got))


def _table_of(run_dir: str, pattern: str):
    return pq.ParquetDataset(sorted(glob.glob(os.path.join(run_dir, "recvs", pattern)))).read()


@pytest.mark.parametrize(
    "args, flag",
    [
        (("--consumers-bind", "tcp://127.0.0.1:5999"), "--duration"),
        (
            ("--consumers-bind", "tcp://127.0.0.1:5999", "--duration", "1", "--rate", "10k"),
            "--rate",
        ),
        (
            ("--consumers-bind", "tcp://127.0.0.1:5999", "--duration", "1", "--count", "10"),
            "--count",
        ),
        (("--producers-connect", "tcp://127.0.0.1:5999", "--duration", "1"), "--producers-connect"),
        (("--duration", "1"), "--role"),
        (
            ("--consumers-bind", "tcp://127.0.0.1:5999", "--duration", "1", "--pattern", "req-rep"),
            "--role",
        ),
        (
            (
                "--consumers-bind",
                "tcp://127.0.0.1:5999",
                "--duration",
                "1",
                "--conflate",
                "producers",
            ),
            "--conflate",
        ),
        (
            ("--consumers-bind", "tcp://127.0.0.1:5999", "--duration", "1", "--max-loss", "0"),
            "--max-loss",
        ),
    ],
)
def test_bad_consumer_side_input_is_one_line_exit_2_nothing_left(tmp_path, capsys, args, flag):
    """In this process, through the CLI's own entry (`python -m zmqload` is sys.exit(cli.main())); the
    same from a real process below."""
    from zmqload import cli

    try:
        status = cli.main(["run", "--role", "consumer", *args, "--out", str(tmp_path)])
    except SystemExit as exc:  # argparse's refusals exit as a process would
        status = exc.code
    err = capsys.readouterr().err
    assert status == 2, err
    lines = err.strip().splitlines()
    assert len(lines) == 1 and flag in lines[0] and "accepted" in lines[0], err
    assert not os.listdir(tmp_path)


def test_bad_consumer_side_input_from_a_process_is_one_line_exit_2_nothing_left(tmp_path):
    done = zmqload_cli(
        "run",
        "--role",
        "consumer",
        "--consumers-bind",
        "tcp://127.0.0.1:5999",
        "--out",
        str(tmp_path),
    )
    assert done.returncode == 2, done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and "--duration" in lines[0] and "accepted" in lines[0], done.stderr
    assert not os.listdir(tmp_path)


def test_a_silent_producer_endpoint_fails_in_bounded_time_naming_it(tmp_path):
    (port,) = free_ports(1)
    start = time.monotonic()
    done = zmqload_cli(
        "run",
        "--role",
        "consumer",
        "--consumers-connect",
        f"tcp://127.0.0.1:{port}",
        "--duration",
        "1",
        "--warmup-timeout-s",
        "2",
        "--out",
        str(tmp_path),
        timeout=60,
    )
    assert done.returncode == 1 and time.monotonic() - start < 15
    last = done.stderr.strip().splitlines()[-1]
    assert f"tcp://127.0.0.1:{port}" in last and "your producer" in last, done.stderr


def test_capacity_refuses_the_consumers_alone(tmp_path):
    done = zmqload_cli(
        "capacity",
        "--role",
        "consumer",
        "--consumers-bind",
        "tcp://127.0.0.1:5999",
        "--out",
        str(tmp_path),
    )
    assert (
        done.returncode == 2
        and "--role" in done.stderr
        and len(done.stderr.strip().splitlines()) == 1
    )
    assert "your producer sent is not seen" in done.stderr
    assert not os.listdir(tmp_path)
