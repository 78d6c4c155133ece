"""Peers that are not zmqload: what users' and benchmark tools' producers really send, garbage and
forged headers included, against a consumer-only run (zmqload binding and connecting) and a normal
run with a stray peer on the port it binds. Each run ends on time, its counts equal what the test's
producers sent (foreign against zmqload's), and its memory and files stay bounded (apparent sizes
too: a seen-map once grew to 17 TB). The producers share no code with zmqload: a C program written
the way libzmq's perf/remote_thr is (zmq_msg_init_size buffers never written) and plain pyzmq."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time

import numpy as np
import pytest
import zmq

from conftest import free_ports, read_table, until_listening
from users_header import header, hostile_messages

# remote_thr's loop (libzmq perf/remote_thr.cpp): messages of `size` bytes it never writes
REMOTE_THR_C = r"""
#include <zmq.h>
#include <stdio.h>
#include <stdlib.h>
int main(int argc, char **argv)
{
    if (argc != 4) return 2;
    int size = atoi(argv[2]), count = atoi(argv[3]);
    void *ctx = zmq_ctx_new();
    void *s = zmq_socket(ctx, ZMQ_PUSH);
    if (zmq_connect(s, argv[1]) != 0) return 1;
    for (int i = 0; i != count; i++) {
        zmq_msg_t msg;
        if (zmq_msg_init_size(&msg, size) != 0 || zmq_sendmsg(s, &msg, 0) < 0) return 1;
        zmq_msg_close(&msg);
    }
    zmq_close(s);           /* LINGER -1: returns once every message is delivered */
    zmq_ctx_term(ctx);
    return 0;
}
"""
DURATION_S = 3
THR_COUNT = 200_000


def _remote_thr(tmp_path) -> str:
    cc = shutil.which("cc") or shutil.which("gcc")
    assert cc, "a C compiler (make installs build-essential)"
    src, exe = tmp_path / "remote_thr.c", tmp_path / "remote_thr"
    src.write_text(REMOTE_THR_C)
    subprocess.run([cc, "-O2", "-o", str(exe), str(src), "-lzmq"], check=True, capture_output=True)
    return str(exe)


def _zmqload(*args: str) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-m", "zmqload", "run", "--json", *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def _ended(proc: subprocess.Popen, started: float, bound_s: float) -> dict:
    out, err = proc.communicate(timeout=bound_s + 60)
    took = time.monotonic() - started
    assert proc.returncode == 0, err
    assert took < bound_s, f"the run took {took:.1f} s"
    return json.loads(out)


def _bounded_files(run_dir: str, limit_bytes: int) -> None:
    """Every file's apparent size and the directory's total under `limit_bytes`; no _maps left."""
    total = 0
    for root, _, files in os.walk(run_dir):
        for name in files:
            size = os.stat(os.path.join(root, name)).st_size
            assert size < limit_bytes, (name, size)
            total += size
    assert total < limit_bytes, total
    assert not os.path.exists(os.path.join(run_dir, "_maps"))


@pytest.fixture(scope="module")
def consumer_only_bound(tmp_path_factory):
    """One consumer-only run binding a port, fed at once by remote_thr (200,000 stale 64-byte
    buffers), plain pyzmq garbage and forged headers, and a plain pyzmq producer writing zmqload's
    header for seqs 0..999 (stream 3)."""
    tmp_path = tmp_path_factory.mktemp("bound")
    thr = _remote_thr(tmp_path)
    (port,) = free_ports(1)
    endpoint = f"tcp://127.0.0.1:{port}"
    started = time.monotonic()
    run = _zmqload(
        "--role",
        "consumer",
        "--consumers-bind",
        endpoint,
        "--duration",
        str(DURATION_S),
        "--out",
        str(tmp_path),
    )
    until_listening(port)
    flood = subprocess.Popen([thr, endpoint, "64", str(THR_COUNT)])
    context = zmq.Context()
    push = context.socket(zmq.PUSH)
    push.setsockopt(zmq.LINGER, 5000)
    push.connect(endpoint)
    messages, forged = hostile_messages(time.monotonic_ns())
    ours = [header(3, seq, time.monotonic_ns()) + b"." * 48 for seq in range(1000)]
    for frames in messages:
        push.send_multipart(frames)
    for body in ours:
        push.send(body)
    push.close()
    context.term()
    assert flood.wait(timeout=60) == 0
    got = _ended(run, started, DURATION_S + 20)
    return got, len(messages), forged, ours


def test_a_consumer_only_run_counts_every_foreign_message_and_ends_on_time(consumer_only_bound):
    got, hostile, forged, ours = consumer_only_bound
    assert got["status"] == "complete"
    assert got["foreign"]["messages"] == THR_COUNT + hostile == got["consumers"][0]["foreign"]
    assert got["consumers"][0]["implausible"] == forged
    # the user's header-writing producer: each seq once, none lost to the garbage around it
    assert got["received"] == len(ours)
    (stream,) = got["streams"]
    assert stream["stream"] == 3 and stream["holes"] == 0
    recvs = read_table(got["run_dir"], "recvs")
    assert sorted(recvs.column("seq").to_numpy().tolist()) == list(range(1000))
    foreign = read_table(got["run_dir"], "foreign")
    sizes = foreign.column("size").to_numpy()
    assert len(sizes) == got["foreign"]["messages"] and int((sizes == 64).sum()) >= THR_COUNT


def test_a_consumer_only_run_stays_bounded_in_memory_and_files(consumer_only_bound):
    got, *_ = consumer_only_bound
    _bounded_files(got["run_dir"], 64 << 20)
    assert got["consumers"][0]["max_rss_kb"] < 400_000


def test_a_consumer_only_run_that_connects_counts_a_users_garbage(tmp_path):
    """zmqload connects to a user's PUSH that binds and sends garbage and forged headers only."""
    context = zmq.Context()
    push = context.socket(zmq.PUSH)
    push.setsockopt(zmq.LINGER, 0)
    port = push.bind_to_random_port("tcp://127.0.0.1")
    try:
        started = time.monotonic()
        run = _zmqload(
            "--role",
            "consumer",
            "--consumers-connect",
            f"tcp://127.0.0.1:{port}",
            "--duration",
            "2",
            "--out",
            str(tmp_path),
        )
        messages, forged = hostile_messages(time.monotonic_ns())
        push.setsockopt(zmq.SNDTIMEO, 60_000)  # the first send waits for zmqload to connect
        for frames in messages:
            push.send_multipart(frames)
        got = _ended(run, started, 2 + 20)
    finally:
        push.close()
        context.term()
    assert got["received"] == 0 and got["streams"] == []
    assert got["foreign"]["messages"] == len(messages)
    assert got["consumers"][0]["implausible"] == forged
    _bounded_files(got["run_dir"], 16 << 20)


def test_a_stray_peer_on_a_normal_runs_port_is_foreign_and_the_accounting_exact(tmp_path):
    """A normal push-pull run binding its consumer's port, with a stray PUSH connected to it sending
    garbage and headers forged with the public key (a run of zmqload's own has a key of its own):
    zmqload's messages are all received and none lost, the stray's are all foreign."""
    (port,) = free_ports(1)
    endpoint = f"tcp://127.0.0.1:{port}"
    context = zmq.Context()
    stray = context.socket(zmq.PUSH)
    stray.setsockopt(zmq.LINGER, 0)
    stray.connect(endpoint)  # queued until zmqload binds
    now = time.monotonic_ns()
    # stream 0, seqs in range: each passes the run's key by chance once in 65,536 (all 200: 0.3%)
    forged_ours = [header(0, seq, now + 1_000_000_000) for seq in range(200)]
    garbage = [bytes(64)] * 100 + [b"text %d" % i for i in range(100)]
    for body in forged_ours + garbage:
        stray.send(body)
    try:
        started = time.monotonic()
        run = _zmqload(
            "--consumers-bind",
            endpoint,
            "--count",
            "20000",
            "--rate",
            "20k",
            "--out",
            str(tmp_path),
        )
        got = _ended(run, started, 40)
    finally:
        stray.close()
        context.term()
    assert got["status"] == "complete"
    assert got["sent"] == 20000 and got["received"] == 20000 and got["lost"] == 0
    assert got["consumers"][0]["foreign"] == len(forged_ours) + len(garbage)
    recvs = read_table(got["run_dir"], "recvs")
    seqs = recvs.column("seq").to_numpy()
    assert np.array_equal(np.sort(seqs), np.arange(20000))  # each once: no forged duplicate
