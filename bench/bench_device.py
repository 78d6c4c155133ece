"""Measuring through a device (issue 27): pub-sub msg/s through an XSUB|XPUB proxy written in C
with zmq_proxy (bench/baseline_device.c, as a user writes one), side by side in one run:

- zmqload_device: zmqload's producer and consumer connected to the C device
  (`--producers-connect FRONT --consumers-connect BACK`), recording every message;
- c_device: a bare C PUB -> SUB pair through the same device binary, no recording;
- zmqload_direct: zmqload pub-sub without the device (what the device costs zmqload);
- c_direct is not run: the engine's direct ceiling against C is bench_engine.py's question.

No HWM anywhere (0 on every socket, the device's too), so nothing is dropped and msg/s is the
pipeline's: zmqload's runs assert 0 lost. Each round starts a fresh device for each runner that
uses one. The order rotates each round; every round is printed, and medians of per-round ratios
and best against best (the C pair can be bimodal by thread placement).

    ZMQLOAD_BENCH_ROUNDS=7 .venv/bin/python -m pytest bench/bench_device.py -o python_files="bench_*.py" \
        -s --benchmark-only --benchmark-columns=median,min,max,rounds
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from contextlib import contextmanager
from typing import Iterator

from conftest import SMOKE
from paired import build_c, compare, free_port, print_rounds, rotating_rounds

SIZE = 64
COUNT = 20_000 if SMOKE else 1_000_000
ROUNDS = 1 if SMOKE else int(os.environ.get("ZMQLOAD_BENCH_ROUNDS", "5"))


@contextmanager
def c_device(binary: str) -> Iterator[tuple[str, str]]:
    """The C XSUB|XPUB proxy in a process of its own, until the block ends: (front, back)."""
    front, back = f"tcp://127.0.0.1:{free_port()}", f"tcp://127.0.0.1:{free_port()}"
    proc = subprocess.Popen([binary, "device", front, back], stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None and proc.stdout.readline().strip() == "ready"
        yield front, back
    finally:
        proc.kill()
        proc.wait(timeout=10)


def zmqload_rate(**options) -> float:
    import zmqload

    out = tempfile.mkdtemp(prefix="zmqload-bench-device-")
    try:
        result = zmqload.run(
            pattern="pub-sub",
            transport="tcp",
            size=SIZE,
            count=COUNT,
            sndhwm=0,
            rcvhwm=0,
            out=out,
            **options,
        )
        assert result.lost == 0 and result.unique_received == COUNT, result
        return result.throughput_msgs
    finally:
        shutil.rmtree(out, ignore_errors=True)


def test_pub_sub_through_a_c_xsub_xpub_device(benchmark):
    binary = build_c("baseline_device")

    def through_zmqload() -> float:
        with c_device(binary) as (front, back):
            return zmqload_rate(producers_connect=front, consumers_connect=back)

    def through_c() -> float:
        with c_device(binary) as (front, back):
            out = subprocess.run(
                [binary, "pair", front, back, str(COUNT), str(SIZE)],
                check=True,
                capture_output=True,
                text=True,
                timeout=600,
            ).stdout.split()
            return int(out[0]) / (int(out[1]) / 1e9)

    runners = {
        "zmqload_device": through_zmqload,
        "c_device": through_c,
        "zmqload_direct": zmqload_rate,
    }
    rates = rotating_rounds(benchmark, runners, ROUNDS)
    summary = compare(rates, subject="zmqload_device")
    benchmark.extra_info.update({"size": SIZE, "count": COUNT, "rounds": ROUNDS, **summary})
    print(f"\npub-sub {SIZE} B, {COUNT:,} messages, {ROUNDS} rounds, msg/s")
    print_rounds(rates, summary, subject="zmqload_device")
    assert all(v > 0 for values in rates.values() for v in values)
