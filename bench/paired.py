"""Three ways to push N messages PUSH -> PULL over tcp loopback, each returning msg/s
over the same span (first send to last receive, CLOCK_MONOTONIC):

- c_baseline: bench/baseline_pushpull.c, a bare zmq_send/zmq_recv pair, no recording
- zmqload: the engine with full recording on both ends (Parquet, histograms, accounting)
- pyzmq_loop: a pure-Python pyzmq sender and receiver that stamp and record like zmqload
"""
from __future__ import annotations

import multiprocessing
import os
import shutil
import socket
import struct
import subprocess
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
BUILD_DIR = os.path.join(HERE, ".build")


def build_c_baseline() -> str:
    """Compile the baseline against the same system libzmq as the engine (pkg-config)."""
    os.makedirs(BUILD_DIR, exist_ok=True)
    binary = os.path.join(BUILD_DIR, "baseline_pushpull")
    source = os.path.join(HERE, "baseline_pushpull.c")
    if not os.path.exists(binary) or os.path.getmtime(binary) < os.path.getmtime(source):
        flags = subprocess.run(["pkg-config", "--cflags", "--libs", "libzmq"], check=True,
                               capture_output=True, text=True).stdout.split()
        subprocess.run([os.environ.get("CC", "cc"), "-O2", "-o", binary, source, *flags], check=True)
    return binary


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def c_baseline(binary: str, size: int, count: int) -> float:
    out = subprocess.run([binary, f"tcp://127.0.0.1:{free_port()}", str(count), str(size)],
                         check=True, capture_output=True, text=True, timeout=600).stdout.split()
    return int(out[0]) / (int(out[1]) / 1e9)


def zmqload_run(size: int, count: int, out_dir: str | None = None) -> float:
    import zmqload
    out = out_dir or tempfile.mkdtemp(prefix="zmqload-bench-")
    try:
        result = zmqload.run(pattern="push-pull", transport="tcp", size=size, count=count, out=out)
        assert result.lost == 0 and result.unique_received == count
        return result.throughput_msgs
    finally:
        if out_dir is None:
            shutil.rmtree(out, ignore_errors=True)


def _pyzmq_receiver(endpoint: str, count: int, ready, result) -> None:
    import zmq
    ctx = zmq.Context()
    pull = ctx.socket(zmq.PULL)
    pull.bind(endpoint)
    ready.set()
    seqs, sent, recv = [], [], []
    unpack = struct.Struct("<Qq").unpack_from
    for _ in range(count):
        msg = pull.recv(copy=True)
        word, t_sent = unpack(msg)
        seqs.append(word)
        sent.append(t_sent)
        recv.append(time.monotonic_ns())
    result.put(recv[-1])
    pull.close()
    ctx.term()


def pyzmq_loop(size: int, count: int) -> float:
    """The same job in pure Python: the loop a user would write without zmqload."""
    import zmq
    mp = multiprocessing.get_context("spawn")
    endpoint = f"tcp://127.0.0.1:{free_port()}"
    ready, result = mp.Event(), mp.Queue()
    receiver = mp.Process(target=_pyzmq_receiver, args=(endpoint, count, ready, result))
    receiver.start()
    ready.wait(30)
    ctx = zmq.Context()
    push = ctx.socket(zmq.PUSH)
    push.connect(endpoint)
    time.sleep(0.1)
    buf = bytearray(size)
    pack = struct.Struct("<Qq").pack_into
    first = time.monotonic_ns()
    for seq in range(count):
        pack(buf, 0, seq, time.monotonic_ns())
        push.send(buf, copy=True)
    last = result.get(timeout=600)
    receiver.join()
    push.close()
    ctx.term()
    return count / ((last - first) / 1e9)
