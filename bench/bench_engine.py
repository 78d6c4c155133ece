"""Engine throughput against a bare C loop and a pure-pyzmq loop, side by side.

Each round runs all three implementations back to back (rotating the order), so machine
noise hits them alike; figures are medians over the rounds and ratios of medians.

    make bench                                    # 5 rounds per size
    ZMQLOAD_BENCH_ROUNDS=9 make bench
"""
from __future__ import annotations

import os
import statistics

import pytest

from conftest import SMOKE
from paired import c_baseline, pyzmq_loop, zmqload_run

SIZES = [16, 64, 1024]
ROUNDS = 1 if SMOKE else int(os.environ.get("ZMQLOAD_BENCH_ROUNDS", "5"))


def _count(size: int) -> int:
    if SMOKE:
        return 20_000
    return 1_000_000 if size >= 1024 else 3_000_000


@pytest.mark.parametrize("size", SIZES)
def test_push_pull_tcp_throughput(benchmark, c_baseline_binary, size):
    count = _count(size)
    py_count = max(count // 10, 10_000)      # the Python loop is slow; msg/s is still comparable
    rates = {"c_baseline": [], "zmqload": [], "pyzmq_loop": []}
    runners = {
        "c_baseline": lambda: c_baseline(c_baseline_binary, size, count),
        "zmqload": lambda: zmqload_run(size, count),
        "pyzmq_loop": lambda: pyzmq_loop(size, py_count),
    }
    order = list(runners)

    def one_round():
        for name in order:
            rates[name].append(runners[name]())
        order.append(order.pop(0))

    benchmark.pedantic(one_round, rounds=ROUNDS, iterations=1)
    medians = {name: statistics.median(values) for name, values in rates.items()}
    benchmark.extra_info.update({
        "size": size, "count": count, "rounds": ROUNDS,
        **{f"{name}_msgs_median": round(value) for name, value in medians.items()},
        **{f"{name}_msgs_all": [round(v) for v in values] for name, values in rates.items()},
        "ratio_zmqload_vs_c": round(medians["zmqload"] / medians["c_baseline"], 3),
        "ratio_zmqload_vs_pyzmq": round(medians["zmqload"] / medians["pyzmq_loop"], 2),
    })
    print(f"\nsize {size}: " + ", ".join(f"{k}={v}" for k, v in benchmark.extra_info.items()
                                          if not k.endswith("_all")))
    assert all(v > 0 for values in rates.values() for v in values)
