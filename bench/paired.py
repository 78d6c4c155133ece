"""Five ways to push N messages PUSH -> PULL over tcp loopback, each returning msg/s
over the same span (first send to last receive, CLOCK_MONOTONIC):

- c_baseline: bench/baseline_pushpull.c, a bare zmq_send/zmq_recv pair, no recording
  (as the scheduler places it, or placed like zmqload's unpaced workers: c_placed)
- zmqload: the engine with full recording on both ends (Parquet, histograms, accounting)
- pyzmq_loop: a pure-Python pyzmq sender and receiver that stamp and record like zmqload
- pyzmq_plain: the loop a user writes first: send / recv in pyzmq, nothing stamped or kept

and how to read side-by-side rounds of them (modes, per-round ratios, best vs best).

The C pair and zmqload run one libzmq file: BENCH_LIBZMQ (--libzmq's words: pyzmq, system or a
path; default --libzmq's).
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


def _default_libzmq() -> str:
    from zmqload.contract.workload import OPTIONS

    return str(OPTIONS["libzmq"].default)


LIBZMQ = os.environ.get("BENCH_LIBZMQ") or _default_libzmq()


def build_c_baseline() -> str:
    """Compile the baseline against the libzmq the engine runs (BENCH_LIBZMQ's)."""
    return build_c("baseline_pushpull")


def build_c(name: str) -> str:
    """bench/NAME.c compiled with the system's zmq.h (pkg-config; the 4.x API is one ABI) and linked to
    BENCH_LIBZMQ's file into bench/.build/NAME-<sha256 of that file>, again only when it or the header the
    baselines share is newer."""
    from zmqload import libzmq

    lib = libzmq.describe(LIBZMQ)
    os.makedirs(BUILD_DIR, exist_ok=True)
    binary = os.path.join(BUILD_DIR, f"{name}-{lib.sha256[:12]}")
    source = os.path.join(HERE, f"{name}.c")
    newest = max(
        os.path.getmtime(source), os.path.getmtime(os.path.join(HERE, "baseline_common.h"))
    )
    if not os.path.exists(binary) or os.path.getmtime(binary) < newest:
        flags = subprocess.run(
            ["pkg-config", "--cflags", "libzmq"], check=True, capture_output=True, text=True
        ).stdout.split()
        subprocess.run(
            [
                os.environ.get("CC", "cc"),
                "-O2",
                "-o",
                binary,
                source,
                *flags,
                lib.file,
                f"-Wl,-rpath,{os.path.dirname(lib.file)}",
            ],
            check=True,
        )
    return binary


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def c_baseline(
    binary: str, size: int, count: int, placement: str | None = None, curve: bool = False
) -> float:
    """The bare C pair; placement "0011" puts each process with its I/O thread on a CPU of its
    own (the fast mode, as zmqload places unpaced workers), None leaves it to the scheduler;
    `curve`: CURVE between the two (BASELINE_CURVE=1)."""
    out = subprocess.run(
        [
            binary,
            f"tcp://127.0.0.1:{free_port()}",
            str(count),
            str(size),
            *filter(None, [placement]),
        ],
        check=True,
        capture_output=True,
        text=True,
        timeout=600,
        env=dict(os.environ, BASELINE_CURVE="1" if curve else "0"),
    ).stdout.split()
    return int(out[0]) / (int(out[1]) / 1e9)


def zmqload_run(size: int, count: int, out_dir: str | None = None, **options: object) -> float:
    """An unpaced push-pull run over tcp (`options`: more Workload fields, e.g. curve="on")."""
    import zmqload

    out = out_dir or tempfile.mkdtemp(prefix="zmqload-bench-")
    try:
        result = zmqload.run(
            pattern="push-pull",
            transport="tcp",
            size=size,
            count=count,
            out=out,
            **{"libzmq": LIBZMQ, **options},
        )
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


def _pyzmq_plain_receiver(endpoint: str, count: int, ready, result) -> None:
    import zmq

    ctx = zmq.Context()
    pull = ctx.socket(zmq.PULL)
    pull.bind(endpoint)
    ready.set()
    for _ in range(count):
        pull.recv()
    result.put(time.monotonic_ns())
    pull.close()
    ctx.term()


def pyzmq_plain(size: int, count: int) -> float:
    """send / recv in pyzmq and nothing else: no timestamps, no records."""
    return _pyzmq_pair(_pyzmq_plain_receiver, size, count, stamp=False)


def pyzmq_loop(size: int, count: int) -> float:
    """The same job as zmqload in pure Python: stamps and records every message."""
    return _pyzmq_pair(_pyzmq_receiver, size, count, stamp=True)


def _pyzmq_pair(receiver_main, size: int, count: int, stamp: bool) -> float:
    import zmq

    mp = multiprocessing.get_context("spawn")
    endpoint = f"tcp://127.0.0.1:{free_port()}"
    ready, result = mp.Event(), mp.Queue()
    receiver = mp.Process(target=receiver_main, args=(endpoint, count, ready, result))
    receiver.start()
    ready.wait(30)
    ctx = zmq.Context()
    push = ctx.socket(zmq.PUSH)
    push.connect(endpoint)
    time.sleep(0.1)
    buf = bytearray(size)
    pack = struct.Struct("<Qq").pack_into
    first = time.monotonic_ns()
    if stamp:
        for seq in range(count):
            pack(buf, 0, seq, time.monotonic_ns())
            push.send(buf, copy=True)
    else:
        message = bytes(buf)
        for _ in range(count):
            push.send(message)
    last = result.get(timeout=600)
    receiver.join()
    push.close()
    ctx.term()
    return count / ((last - first) / 1e9)


def span_from_records(run_dir: str, expected: int) -> tuple[int, int]:
    """(earliest accepted send, latest receive) of a zmqload run, straight from its Parquet (numpy,
    no zmqload code), after checking that recvs/ holds every one of `expected` messages once;
    msg/s = expected / the span."""
    import numpy as np
    import pyarrow.parquet as pq

    recvs = pq.read_table(os.path.join(run_dir, "recvs"), columns=["stream", "seq", "t_recv_ns"])
    sends = pq.read_table(os.path.join(run_dir, "sends"), columns=["t_sent_ns", "status"])
    key = recvs.column("stream").to_numpy().astype(np.int64) << 48 | recvs.column("seq").to_numpy()
    assert len(key) == expected and len(np.unique(key)) == expected, (
        f"{run_dir}: recvs/ holds other than every message once"
    )
    ok = sends.column("status").to_numpy() == 0
    return int(sends.column("t_sent_ns").to_numpy()[ok].min()), int(
        recvs.column("t_recv_ns").to_numpy().max()
    )


# --- running and reading side-by-side rounds -------------------------------------------------


def rotating_rounds(benchmark, runners: dict, rounds: int) -> dict[str, list]:
    """Each round runs every runner back to back, the order rotating by one each round, so
    machine noise and order effects hit every implementation alike; name -> results."""
    results: dict[str, list] = {name: [] for name in runners}
    order = list(runners)

    def one_round():
        for name in order:
            results[name].append(runners[name]())
        order.append(order.pop(0))

    benchmark.pedantic(one_round, rounds=rounds, iterations=1)
    return results


def median_interval(values: list[float], confidence: float = 0.95) -> tuple[float, float] | None:
    """A distribution-free interval for the median of `values` (per-round differences): the
    k-th smallest and k-th largest, k the largest with P(Binomial(n, 1/2) < k) <= (1 -
    confidence) / 2. None when there are too few rounds for it (fewer than 6 at 95%)."""
    from math import comb

    n = len(values)
    tail, k = 0.0, 0
    while k < n and tail + comb(n, k) / 2**n <= (1 - confidence) / 2:
        tail += comb(n, k) / 2**n
        k += 1
    if k == 0:
        return None
    ordered = sorted(values)
    return ordered[k - 1], ordered[n - k]


MODE_GAP = 1.4
"""Rounds of one implementation form two modes when, sorted, two neighbours differ by more
than this factor (the C pair's ~3M / ~7M msg/s at 64 B, set by where the scheduler puts its
four threads); closer values are one mode with noise."""


def modes(values: list[float]) -> list[str]:
    """'fast' / 'slow' per round when the values split into two modes, else 'one'."""
    ordered = sorted(values)
    gaps = [(b / a, b) for a, b in zip(ordered, ordered[1:]) if a > 0]
    if not gaps or max(gaps)[0] < MODE_GAP:
        return ["one"] * len(values)
    split = max(gaps)[1]
    return ["fast" if v >= split else "slow" for v in values]


def compare(rounds: dict[str, list[float]], subject: str = "zmqload") -> dict:
    """What the rounds say about `subject` against every other implementation: the median of
    per-round ratios (each round's pair ran back to back, so machine noise hits both) and
    best round against best round (the ceiling each reached)."""
    import statistics

    out: dict = {
        name: {
            "all": [round(v) for v in values],
            "median": round(statistics.median(values)),
            "best": round(max(values)),
            "worst": round(min(values)),
            "modes": modes(values),
        }
        for name, values in rounds.items()
    }
    for other, values in rounds.items():
        if other == subject:
            continue
        ratios = [a / b for a, b in zip(rounds[subject], values)]
        out[f"{subject}/{other}"] = {
            "per_round": [round(r, 3) for r in ratios],
            "median_of_ratios": round(statistics.median(ratios), 3),
            "best_vs_best": round(max(rounds[subject]) / max(values), 3),
        }
    return out


def print_rounds(rates: dict[str, list[float]], summary: dict, subject: str = "zmqload") -> None:
    """Every implementation's rounds (and their modes), then `subject` against each other one:
    the median of per-round ratios, best against best, and every round's ratio."""
    width = max(len(name) for name in rates)
    for name in rates:
        s = summary[name]
        print(
            f"  {name:{width}s} median {s['median']:>10,} best {s['best']:>10,} worst {s['worst']:>10,}  "
            + " ".join(
                f"{v / 1e6:.2f}M{'' if m == 'one' else '(' + m[0] + ')'}"
                for v, m in zip(s["all"], s["modes"])
            )
        )
    for name in rates:
        if name != subject:
            r = summary[f"{subject}/{name}"]
            print(
                f"  {subject} / {name:{width}s} median of per-round ratios {r['median_of_ratios']:.2f}, "
                f"best vs best {r['best_vs_best']:.2f}   rounds: {' '.join(f'{x:.2f}' for x in r['per_round'])}"
            )
