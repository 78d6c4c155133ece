"""Engine throughput against a bare C loop (placed by the scheduler, and placed like zmqload's
unpaced workers) and two pure-pyzmq loops, side by side.

Each round runs every implementation back to back (rotating the order), so machine noise
hits them alike. What counts (issue 15): the median of per-round ratios over >= 9 rounds and
best round vs best round (the ceiling), with every round's value and its mode printed (the
bare C pair is bimodal at small sizes: where the scheduler puts its four threads).

    make bench                                    # 9 rounds per size
    ZMQLOAD_BENCH_ROUNDS=15 make bench
"""

from __future__ import annotations

import os

import pytest

from conftest import SMOKE
from paired import (
    c_baseline,
    compare,
    print_rounds,
    pyzmq_loop,
    pyzmq_plain,
    rotating_rounds,
    zmqload_run,
)

SIZES = [16, 64, 1024]
ROUNDS = 1 if SMOKE else int(os.environ.get("ZMQLOAD_BENCH_ROUNDS", "9"))


def _count(size: int) -> int:
    if SMOKE:
        return 20_000
    return 1_000_000 if size >= 1024 else 3_000_000


@pytest.mark.parametrize("size", SIZES)
def test_push_pull_tcp_throughput(benchmark, c_baseline_binary, size):
    count = _count(size)
    py_count = max(count // 10, 10_000)  # the Python loops are slow; msg/s is still comparable
    runners = {
        "c_baseline": lambda: c_baseline(c_baseline_binary, size, count),
        # each process and its I/O thread on a CPU of its own: libzmq's own fast mode
        "c_placed": lambda: c_baseline(c_baseline_binary, size, count, placement="0011"),
        "zmqload": lambda: zmqload_run(size, count),
        "pyzmq_plain": lambda: pyzmq_plain(size, py_count),
        "pyzmq_loop": lambda: pyzmq_loop(size, py_count),
    }
    rates = rotating_rounds(benchmark, runners, ROUNDS)
    summary = compare(rates)
    benchmark.extra_info.update(
        {"size": size, "count": count, "python_count": py_count, "rounds": ROUNDS, **summary}
    )
    print(
        f"\nsize {size} B, {ROUNDS} rounds, msg/s (mode per round: fast / slow when the rounds split in two)"
    )
    print_rounds(rates, summary)
    assert all(v > 0 for values in rates.values() for v in values)
