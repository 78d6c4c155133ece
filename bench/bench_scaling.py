"""Engine ceiling (1): N producers x M consumers, and inproc, against bare C run the same way.

PUSH -> PULL, unpaced, 64 B, over tcp loopback in four shapes (1x1, 2x2, 4x4, 4x1), and over
inproc 1x1. Each round runs zmqload and its C yardstick back to back, rotating the order:

- tcp N x M: bench/baseline_nxm.c, N sender processes each with one PUSH per receiver
  (round-robin, like a PUSH connected to all M) and M receiver processes, one context with
  one I/O thread each, as zmqload's workers; twice: `c` as the scheduler places them, and
  `c_placed` with every sender (and its I/O thread) on the first CPU this process may use and
  every receiver on the second, as zmqload's --cpu-placement auto places push-pull workers on
  two CPUs (zmqload/runner/placement.py; on more CPUs zmqload spreads each side further);
- inproc: bench/baseline_inproc.c, two threads of one process sharing one context (zmqload's
  inproc workers are threads of one process too); `c` as the scheduler places them, `c_placed`
  with the process on the first CPU this process may use, as zmqload places its inproc pair.

msg/s for both = messages received / (latest last receive - earliest first send), CLOCK_MONOTONIC.
For zmqload it is computed from the run's Parquet (recvs/ t_recv_ns, sends/ t_sent_ns) and
checked against `RunResult.throughput_msgs` (which must be the same aggregate figure).
CPU: the cores this process tree kept busy during that span (bench/cpu_span.py), next to the
whole machine's, so "two cores are the limit" can be read off.

    ZMQLOAD_BENCH_ROUNDS=5 .venv/bin/python -m pytest bench/bench_scaling.py -o python_files="bench_*.py" \
        -s --benchmark-only --benchmark-columns=median,min,max,rounds
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import statistics
import subprocess
import tempfile

import pytest

from conftest import SMOKE
from cpu_span import CpuSampler
from paired import build_c, compare, rotating_rounds, span_from_records

SIZE = 64
TOTAL = 20_000 if SMOKE else 2_000_000  # messages per run, over all producers
ROUNDS = 1 if SMOKE else int(os.environ.get("ZMQLOAD_BENCH_ROUNDS", "3"))
SHAPES = [(1, 1), (2, 2), (4, 4), (4, 1)]


def free_ports(n: int) -> int:
    """A base port with n free ports from it (held briefly open to check)."""
    for _ in range(50):
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            base = s.getsockname()[1]
        if base + n >= 65535:
            continue
        held = []
        try:
            for p in range(base, base + n):
                s = socket.socket()
                held.append(s)
                s.bind(("127.0.0.1", p))
            return base
        except OSError:
            continue
        finally:
            for s in held:
                s.close()
    raise RuntimeError("no run of free ports")


def run_c(cmd: list[str], expected: int, on_cpu: int | None = None) -> dict:
    pin = None if on_cpu is None else (lambda: os.sched_setaffinity(0, {on_cpu}))
    with CpuSampler() as cpu:
        out = subprocess.run(
            cmd, check=True, capture_output=True, text=True, timeout=600, preexec_fn=pin
        ).stdout.split()
    msgs, elapsed, first, last = map(int, out)
    assert msgs == expected, f"{cmd}: {msgs} of {expected} received"
    return {"rate": msgs / (elapsed / 1e9), **cpu.in_span(first, last)}


def run_zmqload(transport: str, producers: int, consumers: int, per_producer: int) -> dict:
    import zmqload

    out = tempfile.mkdtemp(prefix="zmqload-scaling-")
    try:
        with CpuSampler() as cpu:
            result = zmqload.run(
                pattern="push-pull",
                transport=transport,
                size=SIZE,
                count=per_producer,
                producers=producers,
                consumers=consumers,
                rate=0,
                out=out,
            )
        expected = producers * per_producer
        assert result.lost == 0 and result.unique_received == expected, result
        first, last = span_from_records(result.run_dir, expected)
        rate = expected / ((last - first) / 1e9)
        with open(os.path.join(result.run_dir, "run.json")) as f:
            meta = json.load(f)
        converter = sum(w.get("writer_cpu_s", 0.0) for w in meta["producers"] + meta["consumers"])
        return {
            "rate": rate,
            "reported": result.throughput_msgs,
            "reported_ratio": result.throughput_msgs / rate,
            "converter_cpu_s": converter,
            "placement": meta.get("cpu_placement"),
            **cpu.in_span(first, last),
        }
    finally:
        shutil.rmtree(out, ignore_errors=True)


def rounds_side_by_side(benchmark, runners: dict, label: str) -> dict:
    figures = rotating_rounds(benchmark, runners, ROUNDS)
    summary = compare({name: [f["rate"] for f in figs] for name, figs in figures.items()})
    print(
        f"\n{label}: {ROUNDS} rounds, msg/s (latest receive - earliest send); cores = CPU-s of the run's "
        f"processes in that span / span (machine: all processes; 2 cores here)"
    )
    for name, figs in figures.items():
        s = summary[name]
        print(
            f"  {name:8s} median {s['median']:>10,} best {s['best']:>10,}   rounds: "
            + " ".join(f"{f['rate'] / 1e6:.2f}M" for f in figs)
        )
        print(
            f"  {'':8s} cores ours/machine: "
            + " ".join(f"{f['cores']:.2f}/{f['machine_cores']:.2f}" for f in figs)
            + f"   CPU us/msg in span: {statistics.median(f['cpu_s'] for f in figs) / (TOTAL / 1e6):.3f}"
            + f"   this process: {statistics.median(f['self_cores'] for f in figs):.2f} cores"
        )
    z = figures["zmqload"]
    print(
        "  zmqload RunResult.throughput_msgs / Parquet aggregate: "
        + " ".join(f"{f['reported_ratio']:.4f}" for f in z)
        + f"; converter CPU-s (after the span): {statistics.median(f['converter_cpu_s'] for f in z):.2f}"
        + f"; cpu_placement {z[0]['placement']}"
    )
    for other in figures:
        if other == "zmqload":
            continue
        r = summary[f"zmqload/{other}"]
        print(
            f"  zmqload / {other}: median of per-round ratios {r['median_of_ratios']:.2f}, best vs best "
            f"{r['best_vs_best']:.2f}   rounds: {' '.join(f'{x:.2f}' for x in r['per_round'])}"
        )
    benchmark.extra_info.update(
        {
            "label": label,
            "size": SIZE,
            "total": TOTAL,
            "rounds": ROUNDS,
            **summary,
            "cpu": {
                name: [{k: v for k, v in f.items() if k != "placement"} for f in figs]
                for name, figs in figures.items()
            },
        }
    )
    for figs in figures.values():
        assert all(f["rate"] > 0 for f in figs)
    assert all(abs(f["reported_ratio"] - 1) < 0.01 for f in z), (
        "throughput_msgs is not the aggregate figure"
    )
    return summary


@pytest.mark.parametrize("shape", SHAPES, ids=[f"{n}x{m}" for n, m in SHAPES])
def test_scaling_tcp(benchmark, shape):
    n, m = shape
    per_producer = TOTAL // n
    binary = build_c("baseline_nxm")
    cpus = sorted(os.sched_getaffinity(0))

    def c(placement: list[str]) -> dict:
        return run_c(
            [binary, str(free_ports(m)), str(n), str(m), str(per_producer), str(SIZE), *placement],
            n * per_producer,
        )

    runners = {"zmqload": lambda: run_zmqload("tcp", n, m, per_producer), "c": lambda: c([])}
    if len(cpus) >= 2 and cpus[1] < 10:  # the C side takes one digit per CPU
        runners["c_placed"] = lambda: c([f"{cpus[0]}{cpus[1]}"])
    rounds_side_by_side(benchmark, runners, f"tcp {n}x{m}, {per_producer:,} per producer, {SIZE} B")


def test_inproc(benchmark):
    binary = build_c("baseline_inproc")
    first_cpu = min(os.sched_getaffinity(0))
    rounds_side_by_side(
        benchmark,
        {
            "zmqload": lambda: run_zmqload("inproc", 1, 1, TOTAL),
            "c": lambda: run_c([binary, str(TOTAL), str(SIZE)], TOTAL),
            "c_placed": lambda: run_c([binary, str(TOTAL), str(SIZE)], TOTAL, on_cpu=first_cpu),
        },
        f"inproc 1x1, {TOTAL:,} messages, {SIZE} B",
    )
