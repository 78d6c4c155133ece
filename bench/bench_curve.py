"""What CURVE costs (issue 27, --curve): unpaced push-pull over tcp loopback with and without CURVE,
zmqload and the bare C pair (bench/baseline_pushpull.c, BASELINE_CURVE=1) side by side.

Each round runs the four back to back, the order rotating by one each round, so machine noise
and order effects hit all alike. What counts: per size, the median over the rounds of the
per-round ratio curve / null, zmqload's beside the C pair's (libzmq's own cost of encryption: a
zmqload ratio well below it would be zmqload's doing), with every round's value printed.

    ZMQLOAD_BENCH_ROUNDS=9 .venv/bin/python -m pytest bench/bench_curve.py -o python_files="bench_*.py" \\
        -s --benchmark-only --benchmark-columns=median,min,max,rounds
"""

from __future__ import annotations

import os

import pytest
from conftest import SMOKE
from paired import c_baseline, compare, rotating_rounds, zmqload_run

SIZES = [64, 1024, 16384]
ROUNDS = 1 if SMOKE else int(os.environ.get("ZMQLOAD_BENCH_ROUNDS", "9"))


def _count(size: int) -> int:
    if SMOKE:
        return 5_000
    return {64: 2_000_000, 1024: 1_000_000}.get(size, 200_000)


@pytest.mark.parametrize("size", SIZES)
def test_curve_against_null_throughput(benchmark, c_baseline_binary, size):
    count = _count(size)
    runners = {
        "zmqload_null": lambda: zmqload_run(size, count),
        "zmqload_curve": lambda: zmqload_run(size, count, curve="on"),
        "c_null": lambda: c_baseline(c_baseline_binary, size, count),
        "c_curve": lambda: c_baseline(c_baseline_binary, size, count, curve=True),
    }
    rates = rotating_rounds(benchmark, runners, ROUNDS)
    ratios = {
        who: compare(
            {"curve": rates[f"{who}_curve"], "null": rates[f"{who}_null"]}, subject="curve"
        )
        for who in ("zmqload", "c")
    }
    benchmark.extra_info.update(
        {
            "size": size,
            "count": count,
            "rounds": ROUNDS,
            "rates": rates,
            **{f"{who} curve/null": r["curve/null"] for who, r in ratios.items()},
        }
    )
    print(f"\nsize {size} B, {count:,} messages, {ROUNDS} rounds, msg/s per round")
    for name, values in rates.items():
        print(f"  {name:14s} " + " ".join(f"{v / 1e6:.3f}M" for v in values))
    for who, r in ratios.items():
        ratio = r["curve/null"]
        print(
            f"  {who:8s} curve / null: median of per-round ratios {ratio['median_of_ratios']:.3f}, best vs best "
            f"{ratio['best_vs_best']:.3f}   rounds: {' '.join(f'{x:.3f}' for x in ratio['per_round'])}"
        )
    assert all(v > 0 for values in rates.values() for v in values)
